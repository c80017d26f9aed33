// Filters and tests, with jinja2's signatures and behaviour (and Hugging Face's `tojson`).
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "model/jinja/evaluator.h"
#include "model/jinja/known_names.h"
#include "model/jinja/py_string.h"

namespace tpserve::jinja {
namespace {

// The argument at `index` or named `name`; null when the call has neither.
const Value* Arg(const CallArgs& args, size_t index, absl::string_view name) {
  if (index < args.positional.size()) return &args.positional[index];
  for (const auto& [key, value] : args.keyword) {
    if (key == name) return &value;
  }
  return nullptr;
}

bool BoolArg(const CallArgs& args, size_t index, absl::string_view name, bool fallback) {
  const Value* v = Arg(args, index, name);
  return v == nullptr ? fallback : v->Truthy();
}

CallArgs Rest(const CallArgs& args, size_t from) {
  CallArgs rest;
  for (size_t i = from; i < args.positional.size(); ++i)
    rest.positional.push_back(args.positional[i]);
  rest.keyword = args.keyword;
  return rest;
}

// jinja2's attribute getter for map/selectattr/sort: dotted paths, integer parts as indices.
absl::StatusOr<Value> GetPath(Evaluator& ev, const Value& item, const Value& path,
                              const Position& at) {
  if (!path.is_string()) return ev.GetItem(item, path, at);
  Value current = item;
  const std::string dot = ".";
  for (const std::string& part : PySplit(path.str(), &dot, -1)) {
    int64_t index;
    absl::StatusOr<Value> next = absl::SimpleAtoi(part, &index)
                                     ? ev.GetItem(current, Value::Int(index), at)
                                     : ev.GetItem(current, Value::String(part), at);
    if (!next.ok()) return next;
    current = *std::move(next);
  }
  return current;
}

// The sort key of jinja2's sort, unique, dictsort, min and max: strings lower-cased unless
// case_sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::String(PyLower(v.str()));
  return v;
}

absl::Status SortValues(std::vector<Value>* keys, std::vector<Value>* values, bool reverse,
                        const Position& at) {
  std::vector<size_t> order(keys->size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  absl::Status error;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    absl::StatusOr<bool> less =
        reverse ? Less((*keys)[y], (*keys)[x]) : Less((*keys)[x], (*keys)[y]);
    if (!less.ok()) {
      if (error.ok()) error = ErrorAt(at, less.status().message());
      return false;
    }
    return *less;
  });
  if (!error.ok()) return error;
  std::vector<Value> sorted;
  for (size_t i : order) sorted.push_back((*values)[i]);
  *values = std::move(sorted);
  return absl::OkStatus();
}

absl::StatusOr<Value> ToInt(const Value& v, const Value* fallback) {
  const Value deflt = fallback == nullptr ? Value::Int(0) : *fallback;
  if (v.is_integer()) return Value::Int(v.int_value());
  if (v.kind() == Value::Kind::kFloat) {
    if (!std::isfinite(v.number())) return deflt;
    return Value::Int(static_cast<int64_t>(std::trunc(v.number())));
  }
  if (v.is_string()) {
    std::string text = PyStrip(v.str(), nullptr, StripSide::kBoth);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    int64_t i;
    if (absl::SimpleAtoi(text, &i)) return Value::Int(i);
    double d;
    if (absl::SimpleAtod(text, &d) && std::isfinite(d)) {
      return Value::Int(static_cast<int64_t>(std::trunc(d)));
    }
  }
  return deflt;
}

absl::StatusOr<Value> Tojson(const Value& input, const CallArgs& args, const Position& at) {
  JsonDumpOptions options;
  options.ensure_ascii = BoolArg(args, 0, "ensure_ascii", false);
  if (const Value* indent = Arg(args, 1, "indent"); indent != nullptr && !indent->is_none()) {
    if (!indent->is_integer()) return ErrorAt(at, "tojson: indent must be an integer");
    options.indent = static_cast<int>(std::clamp<int64_t>(indent->int_value(), 0, 64));
  }
  if (const Value* separators = Arg(args, 2, "separators");
      separators != nullptr && !separators->is_none()) {
    if (!separators->is_sequence() || separators->items().size() != 2 ||
        !separators->items()[0].is_string() || !separators->items()[1].is_string()) {
      return ErrorAt(at, "tojson: separators must be a pair of strings");
    }
    options.item_separator = separators->items()[0].str();
    options.key_separator = separators->items()[1].str();
    if (options.item_separator.empty()) options.item_separator = std::string();
  }
  options.sort_keys = BoolArg(args, 3, "sort_keys", false);
  absl::StatusOr<std::string> text = JsonDumps(input, options);
  if (!text.ok()) return ErrorAt(at, text.status().message());
  return Value::String(*std::move(text));
}

absl::StatusOr<Value> Indent(const Value& input, const CallArgs& args) {
  std::string indention = "    ";
  if (const Value* width = Arg(args, 0, "width")) {
    indention =
        width->is_string()
            ? width->str()
            : std::string(static_cast<size_t>(std::clamp<int64_t>(width->int_value(), 0, 1024)),
                          ' ');
  }
  const bool first = BoolArg(args, 1, "first", false);
  const bool blank = BoolArg(args, 2, "blank", false);
  const std::vector<std::string> lines = PySplitLines(input.ToString() + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    if (i > 0 && (blank || !lines[i].empty())) out += indention;
    out += lines[i];
  }
  if (first) out = indention + out;
  return Value::String(std::move(out));
}

// jinja2's `title` filter: words begin after '-', whitespace or an opening bracket.
std::string JinjaTitle(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (char32_t c : DecodeUtf8(s)) {
    const bool delimiter = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || PyIsSpace(c);
    std::string one;
    AppendUtf8(c, &one);
    out += word_start ? PyUpper(one) : PyLower(one);
    word_start = delimiter;
  }
  return out;
}

}  // namespace

absl::StatusOr<Value> RunFilter(Evaluator& ev, const std::string& name, const Value& input,
                                const CallArgs& args, const Position& at) {
  auto fail_undefined = [&]() -> absl::Status { return ErrorAt(at, input.undefined_hint()); };
  if (name == "default" || name == "d") {
    const Value* fallback = Arg(args, 0, "default_value");
    const bool boolean = BoolArg(args, 1, "boolean", false);
    if (input.is_undefined() || (boolean && !input.Truthy())) {
      return fallback == nullptr ? Value::String("") : *fallback;
    }
    return input;
  }
  if (name == "length" || name == "count") {
    const int64_t n = input.Length();
    if (n < 0)
      return ErrorAt(at, absl::StrCat("object of type '", input.TypeName(), "' has no len()"));
    return Value::Int(n);
  }
  if (name == "string") {
    return input.is_safe() ? input : Value::String(input.ToString());
  }
  if (name == "safe") return Value::SafeString(input.ToString());
  if (name == "escape" || name == "e") {
    return input.is_safe() ? input : Value::SafeString(HtmlEscape(input.ToString()));
  }
  if (name == "trim") {
    const Value* chars = Arg(args, 0, "chars");
    const std::string* set = chars != nullptr && chars->is_string() ? &chars->str() : nullptr;
    return Value::String(PyStrip(input.ToString(), set, StripSide::kBoth));
  }
  if (name == "upper") return Value::String(PyUpper(input.ToString()));
  if (name == "lower") return Value::String(PyLower(input.ToString()));
  if (name == "capitalize") return Value::String(PyCapitalize(input.ToString()));
  if (name == "title") return Value::String(JinjaTitle(input.ToString()));
  if (name == "replace") {
    const Value* from = Arg(args, 0, "old");
    const Value* to = Arg(args, 1, "new");
    const Value* count = Arg(args, 2, "count");
    if (from == nullptr || to == nullptr) return ErrorAt(at, "replace: needs old and new");
    return ev.MakeString(PyReplace(input.ToString(), from->ToString(), to->ToString(),
                                   count == nullptr || count->is_none() ? -1 : count->int_value()),
                         at);
  }
  if (name == "tojson") return Tojson(input, args, at);
  if (name == "indent") return Indent(input, args);
  if (name == "int") return ToInt(input, Arg(args, 0, "default"));
  if (name == "float") {
    if (input.is_number()) return Value::Float(input.number());
    double d;
    if (input.is_string() &&
        absl::SimpleAtod(PyStrip(input.str(), nullptr, StripSide::kBoth), &d)) {
      return Value::Float(d);
    }
    const Value* fallback = Arg(args, 0, "default");
    return fallback == nullptr ? Value::Float(0) : *fallback;
  }
  if (name == "abs") {
    if (input.kind() == Value::Kind::kFloat) return Value::Float(std::fabs(input.number()));
    if (input.is_integer()) return Value::Int(std::llabs(input.int_value()));
    return ErrorAt(at, absl::StrCat("bad operand type for abs(): '", input.TypeName(), "'"));
  }
  if (name == "round") {
    if (!input.is_number()) return ErrorAt(at, "round: the value is not a number");
    const Value* precision = Arg(args, 0, "precision");
    const Value* method = Arg(args, 1, "method");
    const double scale = std::pow(10.0, precision == nullptr ? 0 : precision->int_value());
    const std::string how = method == nullptr ? "common" : method->ToString();
    const double x = input.number() * scale;
    const double r = how == "ceil" ? std::ceil(x) : how == "floor" ? std::floor(x) : std::round(x);
    return Value::Float(r / scale);
  }
  if (name == "attr") {
    const Value* attribute = Arg(args, 0, "name");
    if (attribute == nullptr) return ErrorAt(at, "attr: needs a name");
    return ev.GetAttribute(input, attribute->ToString(), at);
  }
  if (name == "items") {
    if (input.is_undefined()) return Value::Generator({});
    if (!input.is_dict()) return ErrorAt(at, "items: can only get item pairs from a mapping");
    std::vector<Value> pairs;
    for (const auto& [key, value] : input.dict().items) pairs.push_back(Value::Tuple({key, value}));
    return Value::Generator(std::move(pairs));
  }
  if (name == "dictsort") {
    if (!input.is_dict()) return ErrorAt(at, "dictsort: the value is not a mapping");
    const bool case_sensitive = BoolArg(args, 0, "case_sensitive", false);
    const Value* by = Arg(args, 1, "by");
    const bool by_value = by != nullptr && by->is_string() && by->str() == "value";
    std::vector<Value> keys, pairs;
    for (const auto& [key, value] : input.dict().items) {
      keys.push_back(SortKey(by_value ? value : key, case_sensitive));
      pairs.push_back(Value::Tuple({key, value}));
    }
    if (absl::Status s = SortValues(&keys, &pairs, BoolArg(args, 2, "reverse", false), at);
        !s.ok()) {
      return s;
    }
    return Value::List(std::move(pairs));
  }
  if (name == "first" || name == "last") {
    if (name == "last" && (input.is_undefined() || input.kind() == Value::Kind::kGenerator)) {
      if (input.is_undefined()) return fail_undefined();
      return ErrorAt(at, "last: 'generator' object is not reversible");
    }
    absl::StatusOr<std::vector<Value>> items = Iterate(input, at);
    if (!items.ok()) return items.status();
    if (items->empty()) return Value::Undefined("no first/last item, the sequence was empty");
    return name == "first" ? items->front() : items->back();
  }
  if (name == "reverse") {
    if (input.is_string()) {
      std::vector<char32_t> cps = DecodeUtf8(input.str());
      std::reverse(cps.begin(), cps.end());
      return Value::String(EncodeUtf8(cps));
    }
    absl::StatusOr<std::vector<Value>> items = Iterate(input, at);
    if (!items.ok()) return items.status();
    std::reverse(items->begin(), items->end());
    return input.kind() == Value::Kind::kGenerator ? Value::List(*std::move(items))
                                                   : Value::Generator(*std::move(items));
  }
  // jinja2's map and select family yield nothing for a falsy input (none included).
  if ((name == "map" || name == "select" || name == "reject" || name == "selectattr" ||
       name == "rejectattr") &&
      !input.Truthy()) {
    return Value::Generator({});
  }
  absl::StatusOr<std::vector<Value>> items = Iterate(input, at);
  if (!items.ok()) return items.status();
  if (name == "list") return Value::List(*std::move(items));
  if (name == "join") {
    const Value* separator = Arg(args, 0, "d");
    const Value* attribute = Arg(args, 1, "attribute");
    std::string out;
    for (size_t i = 0; i < items->size(); ++i) {
      if (i > 0 && separator != nullptr) out += separator->ToString();
      Value item = (*items)[i];
      if (attribute != nullptr && !attribute->is_none()) {
        absl::StatusOr<Value> got = GetPath(ev, item, *attribute, at);
        if (!got.ok()) return got;
        item = *std::move(got);
      }
      out += item.ToString();
      if (static_cast<int64_t>(out.size()) > ev.limits().max_output_bytes) {
        return ev.MakeString(std::move(out), at);
      }
    }
    return Value::String(std::move(out));
  }
  if (name == "map") {
    std::vector<Value> out;
    const Value* attribute = Arg(args, 99, "attribute");
    if (attribute == nullptr && (args.positional.empty() || !args.positional[0].is_string())) {
      return ErrorAt(at, "map: needs a filter name or attribute=");
    }
    for (const Value& item : *items) {
      absl::StatusOr<Value> mapped;
      if (attribute != nullptr) {
        mapped = GetPath(ev, item, *attribute, at);
        if (mapped.ok() && mapped->is_undefined()) {
          if (const Value* fallback = Arg(args, 99, "default")) mapped = *fallback;
        }
      } else {
        mapped = ev.ApplyFilter(args.positional[0].str(), item, Rest(args, 1), at);
      }
      if (!mapped.ok()) return mapped;
      out.push_back(*std::move(mapped));
    }
    return Value::Generator(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool by_attribute = name == "selectattr" || name == "rejectattr";
    const bool keep_if = name == "select" || name == "selectattr";
    const size_t test_at = by_attribute ? 1 : 0;
    if (by_attribute && args.positional.empty())
      return ErrorAt(at, absl::StrCat(name, ": needs an attribute"));
    std::vector<Value> out;
    for (const Value& item : *items) {
      Value subject = item;
      if (by_attribute) {
        absl::StatusOr<Value> got = GetPath(ev, item, args.positional[0], at);
        if (!got.ok()) return got;
        subject = *std::move(got);
      }
      bool passes;
      if (args.positional.size() > test_at) {
        absl::StatusOr<bool> result =
            ev.ApplyTest(args.positional[test_at].ToString(), subject, Rest(args, test_at + 1), at);
        if (!result.ok()) return result.status();
        passes = *result;
      } else {
        passes = subject.Truthy();
      }
      if (passes == keep_if) out.push_back(item);
    }
    return Value::Generator(std::move(out));
  }
  if (name == "unique" || name == "sort" || name == "min" || name == "max") {
    const bool is_sort = name == "sort";
    const bool case_sensitive = BoolArg(args, is_sort ? 1 : 0, "case_sensitive", false);
    const Value* attribute = Arg(args, is_sort ? 2 : 1, "attribute");
    std::vector<Value> keys;
    for (const Value& item : *items) {
      Value key = item;
      if (attribute != nullptr && !attribute->is_none()) {
        absl::StatusOr<Value> got = GetPath(ev, item, *attribute, at);
        if (!got.ok()) return got;
        key = *std::move(got);
      }
      keys.push_back(SortKey(key, case_sensitive));
    }
    if (name == "unique") {
      std::vector<Value> out, seen;
      for (size_t i = 0; i < items->size(); ++i) {
        if (std::none_of(seen.begin(), seen.end(),
                         [&](const Value& s) { return Equal(s, keys[i]); })) {
          seen.push_back(keys[i]);
          out.push_back((*items)[i]);
        }
      }
      return Value::Generator(std::move(out));
    }
    std::vector<Value> sorted = *items;
    if (absl::Status s =
            SortValues(&keys, &sorted, is_sort && BoolArg(args, 0, "reverse", false), at);
        !s.ok()) {
      return s;
    }
    if (is_sort) return Value::List(std::move(sorted));
    if (sorted.empty()) return Value::Undefined("no min/max item, the sequence was empty");
    return name == "min" ? sorted.front() : sorted.back();
  }
  if (name == "sum") {
    const Value* attribute = Arg(args, 0, "attribute");
    const Value* start = Arg(args, 1, "start");
    Value total = start == nullptr ? Value::Int(0) : *start;
    for (const Value& item : *items) {
      Value term = item;
      if (attribute != nullptr && !attribute->is_none()) {
        absl::StatusOr<Value> got = GetPath(ev, item, *attribute, at);
        if (!got.ok()) return got;
        term = *std::move(got);
      }
      if (!term.is_number() || !total.is_number())
        return ErrorAt(at, "sum: the items are not numbers");
      total = total.kind() == Value::Kind::kFloat || term.kind() == Value::Kind::kFloat
                  ? Value::Float(total.number() + term.number())
                  : Value::Int(total.int_value() + term.int_value());
    }
    return total;
  }
  return ErrorAt(at, absl::StrCat("unsupported filter '", name, "'"));
}

absl::StatusOr<bool> RunTest(Evaluator& ev, const std::string& name, const Value& input,
                             const CallArgs& args, const Position& at) {
  using Kind = Value::Kind;
  const Kind k = input.kind();
  if (name == "defined") return k != Kind::kUndefined;
  if (name == "undefined") return k == Kind::kUndefined;
  if (name == "none") return k == Kind::kNone;
  if (name == "boolean") return k == Kind::kBool;
  if (name == "true") return k == Kind::kBool && input.bool_value();
  if (name == "false") return k == Kind::kBool && !input.bool_value();
  if (name == "integer") return k == Kind::kInt;
  if (name == "float") return k == Kind::kFloat;
  if (name == "number") return input.is_number();
  if (name == "string") return k == Kind::kString;
  if (name == "mapping") return k == Kind::kDict;
  if (name == "iterable" && k == Kind::kGenerator) return true;
  if (name == "iterable" || name == "sequence") {
    return k == Kind::kString || k == Kind::kList || k == Kind::kTuple || k == Kind::kDict ||
           k == Kind::kUndefined;
  }
  if (name == "callable") return k == Kind::kCallable;
  if (name == "escaped") return false;
  if (name == "lower") return k == Kind::kString && PyLower(input.str()) == input.str();
  if (name == "upper") return k == Kind::kString && PyUpper(input.str()) == input.str();
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!input.is_integer()) return ErrorAt(at, absl::StrCat("test '", name, "' needs an integer"));
    if (name == "divisibleby") {
      const Value* d = Arg(args, 0, "num");
      if (d == nullptr || !d->is_integer() || d->int_value() == 0) {
        return ErrorAt(at, "divisibleby: needs a non-zero integer");
      }
      return input.int_value() % d->int_value() == 0;
    }
    return (input.int_value() % 2 != 0) == (name == "odd");
  }
  if (name == "sameas") {
    const Value* other = Arg(args, 0, "other");
    if (other == nullptr) return ErrorAt(at, "sameas: needs a value");
    if (k != other->kind()) return false;
    if (k == Kind::kNone || k == Kind::kUndefined) return true;
    if (k == Kind::kBool) return input.bool_value() == other->bool_value();
    return Equal(input, *other) && (k == Kind::kInt || k == Kind::kString);
  }
  static const auto* kOperators = new absl::flat_hash_map<std::string, std::string>{
      {"eq", "=="}, {"equalto", "=="}, {"==", "=="},      {"ne", "!="},
      {"!=", "!="}, {"lt", "<"},       {"lessthan", "<"}, {"<", "<"},
      {"le", "<="}, {"<=", "<="},      {"gt", ">"},       {"greaterthan", ">"},
      {">", ">"},   {"ge", ">="},      {">=", ">="},      {"in", "in"}};
  if (auto it = kOperators->find(name); it != kOperators->end()) {
    const Value* other = Arg(args, 0, "b");
    if (other == nullptr) return ErrorAt(at, absl::StrCat("test '", name, "' needs a value"));
    return CompareValues(it->second, input, *other, at);
  }
  if (name == "filter" || name == "test") {
    return input.is_string() &&
           (name == "filter" ? IsKnownFilter(input.str()) : IsKnownTest(input.str()));
  }
  return ErrorAt(at, absl::StrCat("unsupported test '", name, "'"));
}

}  // namespace tpserve::jinja
