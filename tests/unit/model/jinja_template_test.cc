// The interpreter against jinja2: each case's expected text is what jinja2 renders in Hugging
// Face's environment (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, its tojson).
// chat_templates_match_jinja2 does the same for whole chat templates.
#include <string>

#include "gtest/gtest.h"
#include "model/jinja/template.h"
#include "nlohmann/json.hpp"

namespace tpserve::jinja {
namespace {

absl::StatusOr<std::string> Render(const std::string& source, const std::string& variables = "{}",
                                   const RenderOptions& options = {}) {
  absl::StatusOr<Template> parsed = Template::Parse(source);
  if (!parsed.ok()) return parsed.status();
  ValueDict vars;
  const nlohmann::ordered_json parsed_variables = nlohmann::ordered_json::parse(variables);
  for (const auto& [name, value] : parsed_variables.items()) {
    vars.Set(name, Value::FromJson(value));
  }
  return parsed->Render(vars, options);
}

TEST(JinjaTemplate, RendersLikeJinja2) {
  const struct {
    const char* source;
    const char* variables;
    const char* expected;
  } cases[] = {
      {R"J({{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 2 ** 3 ** 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 / 2 }})J",
       R"J({})J", R"J(7|9|64|3|-4|2|3.5)J"},
      {R"J({{ 1 / 3 }}|{{ 1e20 * 1.0 }}|{{ 2.0 }}|{{ 0.0001 }}|{{ 0.00001 }}|{{ 1.5e300 * 10 }}|{{ 10 ** 15 * 1.0 }}|{{ 10 ** 16 * 1.0 }})J",
       R"J({})J",
       R"J(0.3333333333333333|1e+20|2.0|0.0001|1e-05|1.5e+301|1000000000000000.0|1e+16)J"},
      {R"J({{ 'a' ~ 1 ~ none ~ true }}|{{ 'x' 'y' }}|{{ "it's" }}|{{ 'tab\there\n' }}|{{ '\u00e9\x41' }}|{{ 'a\qb' }})J",
       R"J({})J",
       R"J(a1NoneTrue|xy|it's|tab	here
|éA|a\qb)J"},
      {R"J({{ [1, 'a', none, true, 2.5] }}|{{ {'k': 'v', 'n': [1]} }}|{{ ('t',) }}|{{ "q'uote" | list }})J",
       R"J({})J",
       R"J([1, 'a', None, True, 2.5]|{'k': 'v', 'n': [1]}|('t',)|['q', "'", 'u', 'o', 't', 'e'])J"},
      {R"J({{ 1 < 2 < 3 }}|{{ 1 < 3 < 2 }}|{{ 'b' in 'abc' }}|{{ 2 not in [1, 3] }}|{{ 'k' in {'k': 1} }}|{{ 1 == 1.0 }}|{{ true == 1 }}|{{ [1] == (1,) }})J",
       R"J({})J", R"J(True|False|True|True|True|True|True|False)J"},
      {R"J({{ x or 'dflt' }}|{{ 0 and 'no' }}|{{ 'yes' if x else 'no' }}|{{ 'only' if false }}|{{ not x }})J",
       R"J({"x": ""})J", R"J(dflt|0|no||True)J"},
      {R"J({{ s[1:] }}|{{ s[::-1] }}|{{ s[-2] }}|{{ l[1:3] }}|{{ l[-1] }}|{{ l[10] }}|{{ s[1:-1:2] }})J",
       R"J({"s": "héllo", "l": [1, 2, 3, 4]})J", R"J(éllo|olléh|l|[2, 3]|4||él)J"},
      {R"J({{ d.a }}|{{ d['a'] }}|{{ d.missing }}|{{ none.attr }}|{{ d.items() | list }}|{{ d.get('zz', 'z') }}|{{ d.get('a') }})J",
       R"J({"d": {"a": 1, "b": [2]}})J", R"J(1|1|||[('a', 1), ('b', [2])]|z|1)J"},
      {R"J(a
  {% if true %}
  b
  {% endif %}
c
)J",
       R"J({})J",
       R"J(a
  b
c)J"},
      {R"J(a  {%- if true -%}  b  {%- endif -%}  c)J", R"J({})J", R"J(abc)J"},
      {R"J(x
    {%+ if true %}y{% endif %}
{# comment #}
z)J",
       R"J({})J",
       R"J(x
    yz)J"},
      {R"J({{ 'a' }}
{{ 'b' }}
)J",
       R"J({})J",
       R"J(a
b)J"},
      {R"J(  {{- 'k' -}}  
{% raw %}{{ not }}{% endraw %})J",
       R"J({})J", R"J(k{{ not }})J"},
      {R"J({% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{% endfor %})J",
       R"J({})J", R"J(103TrueFalse3212FalseFalse3321FalseTrue3)J"},
      {R"J({% for k, v in d | items %}{{ k }}={{ v }};{% else %}empty{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %})J",
       R"J({"d": {"b": 1, "a": 2}})J", R"J(b=1;a=2;|empty)J"},
      {R"J({% for x in range(10) if x is odd %}{{ x }}{% if x > 4 %}{% break %}{% endif %}{% endfor %}|{% for x in [1,2,3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %})J",
       R"J({})J", R"J(135|13)J"},
      {R"J({% set n = 0 %}{% for x in [1, 2] %}{% set n = n + x %}{{ n }}{% endfor %}|{{ n }}|{% set ns = namespace(total=0) %}{% for x in [1, 2] %}{% set ns.total = ns.total + x %}{% endfor %}{{ ns.total }})J",
       R"J({})J", R"J(12|0|3)J"},
      {R"J({% for x in [1, 2, 3] %}{{ loop.previtem | default('-') }}{{ loop.nextitem | default('-') }}{{ loop.cycle('a', 'b') }} {% endfor %})J",
       R"J({})J", R"J(-2a 13b 2-a )J"},
      {R"J({{ '  hi  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'hello world' | title }}|{{ 'hELLO' | capitalize }}|{{ 'abc' | upper }}|{{ 'a-b' | replace('-', '+') }}|{{ [3, 1, 2] | sort }}|{{ ['b', 'A', 'a'] | unique | list }})J",
       R"J({})J", R"J(hi|hi|Hello World|Hello|ABC|a+b|[1, 2, 3]|['b', 'A'])J"},
      {R"J({{ tools | tojson }}|{{ tools | tojson(indent=2) }}|{{ {'u': 'é"\n'} | tojson }}|{{ [1.0, 2, none, true] | tojson(separators=(',', ':')) }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }})J",
       R"J({"tools": [{"name": "f", "params": {"x": [1, 2], "y": {}}}]})J",
       R"J([{"name": "f", "params": {"x": [1, 2], "y": {}}}]|[
  {
    "name": "f",
    "params": {
      "x": [
        1,
        2
      ],
      "y": {}
    }
  }
]|{"u": "é\"\n"}|[1.0,2,null,true]|{"a": 2, "b": 1})J"},
      {R"J({{ l | map(attribute='n') | join(', ') }}|{{ l | selectattr('n', 'equalto', 2) | list }}|{{ l | rejectattr('n', 'gt', 1) | list | length }}|{{ l | map(attribute='n') | select('odd') | list }}|{{ none | selectattr('n') | list }})J",
       R"J({"l": [{"n": 1}, {"n": 2}, {"n": 3}]})J", R"J(1, 2, 3|[{'n': 2}]|1|[1, 3]|[])J"},
      {R"J({{ missing | default('d') }}|{{ '' | default('d', true) }}|{{ 'abc' | length }}|{{ {'a': 1} | length }}|{{ d | dictsort }}|{{ [1, 2] | first }}{{ [1, 2] | last }}|{{ '42' | int + 1 }}|{{ 'x' | int(7) }}|{{ 3.7 | int }}|{{ [1, 2.5] | sum }}|{{ [3, 1] | max }})J",
       R"J({"d": {"b": 1, "A": 2}})J", R"J(d|d|3|1|[('A', 2), ('b', 1)]|12|43|7|3|3.5|3)J"},
      {R"J({{ 'line1\nline2\n\nline4' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}|{{ '<&>' | e }}|{{ '<b>' | safe + '<i>' }}|{{ 'x' ~ ('<' | safe) }})J",
       R"J({})J",
       R"J(line1
  line2

  line4|  a
  b|&lt;&amp;&gt;|<b>&lt;i&gt;|x<)J"},
      {R"J({{ ' a b  c ' .split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ '  x '.strip() }}|{{ 'xxy'.lstrip('x') }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ '{} and {name}'.format(1, name='n') }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'Hello World'.lower() }}|{{ 'ab'.find('b') }})J",
       R"J({})J",
       R"J(['a', 'b', 'c']|['a', 'b', '', 'c']|['a', 'b,c']|['a,b', 'c']|x|y|True|True|1 and n|bba|hello world|1)J"},
      {R"J({% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(name='c', punct='.') }})J",
       R"J({})J", R"J(Hi a! Hi b? Hi c.)J"},
      {R"J({% set block %}inside {{ 1 + 1 }}{% endset %}[{{ block }}]{% set up | upper %}shout{% endset %}{{ up }}{% filter upper %}filtered{% endfilter %})J",
       R"J({})J", R"J([inside 2]SHOUTFILTERED)J"},
      {R"J({{ none is none }}{{ 1 is number }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ x is defined }}{{ x is undefined }}{{ 3 is divisibleby 3 }}{{ 2 is even }}{{ 'ab' is lower }}{{ true is boolean }}{{ 1 is integer }}{{ 1.0 is float }}{{ [] is sequence }}{{ 1 is in [1] }}{{ 1 is sameas 1 }})J",
       R"J({})J", R"J(TrueTrueTrueTrueTrueFalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue)J"},
      {R"J({{ x }}|{{ x | string }}|{{ x | length }}|{% for i in x %}no{% endfor %}|{{ 'yes' if not x }}|{{ x is none }})J",
       R"J({})J", R"J(||0||yes|False)J"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<std::string> text = Render(c.source, c.variables);
    ASSERT_TRUE(text.ok()) << c.source << ": " << text.status();
    EXPECT_EQ(*text, c.expected) << c.source;
  }
}

// Where jinja2 raises, the interpreter refuses too, naming where.
TEST(JinjaTemplate, ErrorsWhereJinja2Errors) {
  const char* sources[] = {
      R"J({{ x.attr }})J",
      R"J({{ x['k'] }})J",
      R"J({{ 'a' + none }})J",
      R"J({{ 1 + 'a' }})J",
      R"J({{ none | list }})J",
      R"J({{ 1 < 'a' }})J",
      R"J({{ [].append(1) }})J",
      R"J({{ {}.update({}) }})J",
      R"J({{ raise_exception('boom') }})J",
      R"J({{ x() }})J",
      R"J({{ 1 // 0 }})J",
      R"J({% for a, b in [[1, 2, 3]] %}{% endfor %})J",
      R"J({{ range(1000000) | length }})J",
      R"J({{ (1,2) | tojson if x is defined else x | tojson }})J",
      R"J({{ [1] | map('frob') | list }})J",
      R"J({% set x.y = 1 %})J",
  };
  for (const char* source : sources) {
    absl::StatusOr<std::string> text = Render(source);
    ASSERT_FALSE(text.ok()) << source << " rendered " << *text;
    EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument) << source;
    EXPECT_NE(text.status().message().find("line 1 column "), std::string::npos)
        << source << ": " << text.status();
  }
}

TEST(JinjaTemplate, SyntaxErrorsNameTheirPosition) {
  const struct {
    const char* source;
    const char* message;
  } cases[] = {
      {"ab\n  {{ 1 + }}", "line 2 column 10: expected an expression"},
      {"{% if x %}\n{% endfor %}", "line 2 column 4: '{% endfor %}' without its opening block"},
      {"{{ 'open }}", "line 1 column 4: unterminated string literal"},
      {"x {# never closed", "line 1 column 3: unterminated comment"},
      {"{% for x in y %}", "the template ends before '{% endfor %}'"},
      {"{% extends 'base' %}", "line 1 column 4: unsupported construct '{% extends %}'"},
      {"{{ x | nosuchfilter }}", "line 1 column 8: unsupported filter 'nosuchfilter'"},
      {"{{ x is nosuchtest }}", "line 1 column 9: unsupported test 'nosuchtest'"},
      {"{% break %}", "'break' outside a for loop"},
      {"{{ a ? b }}", "line 1 column 6: unexpected character '?'"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<Template> parsed = Template::Parse(c.source);
    ASSERT_FALSE(parsed.ok()) << c.source;
    EXPECT_NE(parsed.status().message().find(c.message), std::string::npos)
        << c.source << ": " << parsed.status();
  }
}

// As jinja2 does, an unknown filter inside an if branch fails only when the branch runs.
TEST(JinjaTemplate, UnknownFilterInAnIfFailsOnlyWhenReached) {
  const std::string source = "{% if x %}{{ x | from_json }}{% else %}plain{% endif %}";
  absl::StatusOr<std::string> text = Render(source);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "plain");
  text = Render(source, R"({"x": "1"})");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("from_json"), std::string::npos) << text.status();
}

TEST(JinjaTemplate, StrftimeNowUsesTheInjectedDate) {
  RenderOptions options;
  options.now = std::tm{};
  options.now->tm_year = 2024 - 1900;
  options.now->tm_mon = 6;
  options.now->tm_mday = 26;
  absl::StatusOr<std::string> text = Render("{{ strftime_now('%d %B %Y') }}", "{}", options);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "26 July 2024");
}

// Hostile templates and inputs end in an error, never a crash, a hang or unbounded memory.
TEST(JinjaTemplate, HostileTemplatesAreRefusedCleanly) {
  const std::string deep_parens = std::string(100000, '(') + "1" + std::string(100000, ')');
  absl::StatusOr<std::string> text = Render("{{ " + deep_parens + " }}");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("nests deeper"), std::string::npos) << text.status();

  std::string deep_ifs;
  for (int i = 0; i < 5000; ++i) deep_ifs += "{% if true %}";
  text = Render(deep_ifs);
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("nests deeper"), std::string::npos) << text.status();

  std::string deep_nots = "{{ ";
  for (int i = 0; i < 100000; ++i) deep_nots += "not ";
  text = Render(deep_nots + "x }}");
  ASSERT_FALSE(text.ok());

  RenderOptions few_steps;
  few_steps.limits.max_steps = 200'000;
  text = Render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                "{}", few_steps);
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("steps"), std::string::npos) << text.status();

  text = Render("{{ range(100001) | length }}");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("range too big"), std::string::npos) << text.status();

  text = Render("{{ 'x' * 1000000000 }}");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("output limit"), std::string::npos) << text.status();

  text = Render("{% set s = 'ab' %}{% for i in range(40) %}{% set s = s ~ s %}{% endfor %}{{ s }}");
  EXPECT_TRUE(text.ok()) << text.status();  // each iteration's s is its own: jinja2 scoping
  text = Render(
      "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}{{ ns.s }}");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("exceeds"), std::string::npos) << text.status();

  text = Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("macro calls nest deeper"), std::string::npos)
      << text.status();

  // Macros nesting expressions as deep as the parser allows stay within the render depth.
  std::string deep_macro = "{% macro f(n) %}{% if n > 0 %}{{ " + std::string(40, '[') + "f(n - 1)" +
                           std::string(40, ']') + " }}{% endif %}{% endmacro %}";
  text = Render(deep_macro + "{{ f(60) }}");
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("nests too deeply"), std::string::npos) << text.status();

  RenderOptions small;
  small.limits.max_output_bytes = 100;
  text = Render("{% for i in range(1000) %}{{ i }}{% endfor %}", "{}", small);
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("exceeds 100 bytes"), std::string::npos) << text.status();

  // A conversation nested deeper than tojson goes is an error, not a stack overflow.
  std::string deep_json = std::string(2000, '[') + std::string(2000, ']');
  nlohmann::ordered_json value = nlohmann::ordered_json::parse(deep_json);
  ValueDict vars;
  vars.Set("v", Value::FromJson(value));
  absl::StatusOr<Template> tojson = Template::Parse("{{ v | tojson }}");
  ASSERT_TRUE(tojson.ok());
  EXPECT_FALSE(tojson->Render(vars).ok());

  for (const char* bad : {"{{", "{%", "{{ 'a", "{{ [1, 2 }}", "{% for %}", "{% set %}", "{{ x[ }}",
                          "{{ x | }}", "{% macro m( %}"}) {
    EXPECT_FALSE(Render(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace tpserve::jinja
