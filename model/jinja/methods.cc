// Methods of str, dict and list that templates call ('a b'.split(), message.get('content')).
// The methods that would mutate a list or dict are refused, as Hugging Face's
// ImmutableSandboxedEnvironment refuses them.
#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "model/jinja/evaluator.h"
#include "model/jinja/py_string.h"

namespace tpserve::jinja {
namespace {

using Method = std::function<absl::StatusOr<Value>(const CallArgs&, Evaluator&)>;

absl::Status Fail(absl::string_view what) { return absl::InvalidArgumentError(std::string(what)); }

const Value* Positional(const CallArgs& args, size_t i) {
  return i < args.positional.size() ? &args.positional[i] : nullptr;
}

// An optional string argument; None counts as absent.
absl::StatusOr<const std::string*> OptionalString(const CallArgs& args, size_t i,
                                                  absl::string_view method) {
  const Value* v = Positional(args, i);
  if (v == nullptr || v->is_none()) return nullptr;
  if (!v->is_string()) {
    return Fail(absl::StrCat(method, "() argument must be str or None, not ", v->TypeName()));
  }
  return &v->str();
}

int64_t OptionalInt(const CallArgs& args, size_t i, int64_t fallback) {
  const Value* v = Positional(args, i);
  return v != nullptr && v->is_integer() ? v->int_value() : fallback;
}

Value StringList(const std::vector<std::string>& parts) {
  std::vector<Value> items;
  for (const std::string& p : parts) items.push_back(Value::String(p));
  return Value::List(std::move(items));
}

// str.format with {} / {0} / {name} fields and no format specs.
absl::StatusOr<Value> Format(const std::string& pattern, const CallArgs& args) {
  std::string out;
  size_t next_auto = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '}') {
      if (i + 1 < pattern.size() && pattern[i + 1] == '}') ++i;
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < pattern.size() && pattern[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = pattern.find('}', i);
    if (close == std::string::npos) return Fail("format: single '{' encountered");
    const std::string field = pattern.substr(i + 1, close - i - 1);
    i = close;
    if (field.find_first_of(":!.[") != std::string::npos) {
      return Fail("unsupported construct: str.format field with a spec or attribute");
    }
    const Value* value = nullptr;
    if (field.empty()) {
      value = Positional(args, next_auto++);
    } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
      value = Positional(args, static_cast<size_t>(std::stoul(field)));
    } else {
      for (const auto& [key, v] : args.keyword) {
        if (key == field) value = &v;
      }
    }
    if (value == nullptr)
      return Fail(absl::StrCat("format: no argument for field '{", field, "}'"));
    out += value->ToString();
  }
  return Value::String(std::move(out));
}

Method StringMethod(const std::string& s, const std::string& name) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const StripSide side = name == "strip"    ? StripSide::kBoth
                           : name == "lstrip" ? StripSide::kLeft
                                              : StripSide::kRight;
    return [s, side, name](const CallArgs& args, Evaluator&) -> absl::StatusOr<Value> {
      absl::StatusOr<const std::string*> chars = OptionalString(args, 0, name);
      if (!chars.ok()) return chars.status();
      return Value::String(PyStrip(s, *chars, side));
    };
  }
  if (name == "split" || name == "rsplit") {
    return [s, name](const CallArgs& args, Evaluator&) -> absl::StatusOr<Value> {
      absl::StatusOr<const std::string*> sep = OptionalString(args, 0, name);
      if (!sep.ok()) return sep.status();
      if (*sep != nullptr && (*sep)->empty()) return Fail("split: empty separator");
      const int64_t maxsplit = OptionalInt(args, 1, -1);
      return StringList(name == "split" ? PySplit(s, *sep, maxsplit) : PyRSplit(s, *sep, maxsplit));
    };
  }
  if (name == "splitlines") {
    return [s](const CallArgs&, Evaluator&) -> absl::StatusOr<Value> {
      return StringList(PySplitLines(s));
    };
  }
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return [s, starts](const CallArgs& args, Evaluator&) -> absl::StatusOr<Value> {
      const Value* affix = Positional(args, 0);
      if (affix == nullptr) return Fail("startswith/endswith: needs an argument");
      std::vector<Value> options =
          affix->is_sequence() ? affix->items() : std::vector<Value>{*affix};
      for (const Value& option : options) {
        if (!option.is_string())
          return Fail("startswith/endswith: the argument must be str or a tuple of str");
        const std::string& a = option.str();
        if (a.size() <= s.size() && (starts ? s.compare(0, a.size(), a) == 0
                                            : s.compare(s.size() - a.size(), a.size(), a) == 0)) {
          return Value::Bool(true);
        }
      }
      return Value::Bool(false);
    };
  }
  if (name == "upper")
    return [s](const CallArgs&, Evaluator&) -> absl::StatusOr<Value> {
      return Value::String(PyUpper(s));
    };
  if (name == "lower")
    return [s](const CallArgs&, Evaluator&) -> absl::StatusOr<Value> {
      return Value::String(PyLower(s));
    };
  if (name == "title")
    return [s](const CallArgs&, Evaluator&) -> absl::StatusOr<Value> {
      return Value::String(PyTitle(s));
    };
  if (name == "capitalize") {
    return [s](const CallArgs&, Evaluator&) -> absl::StatusOr<Value> {
      return Value::String(PyCapitalize(s));
    };
  }
  if (name == "replace") {
    return [s](const CallArgs& args, Evaluator& ev) -> absl::StatusOr<Value> {
      const Value* from = Positional(args, 0);
      const Value* to = Positional(args, 1);
      if (from == nullptr || to == nullptr || !from->is_string() || !to->is_string()) {
        return Fail("replace: needs two strings");
      }
      return ev.MakeString(PyReplace(s, from->str(), to->str(), OptionalInt(args, 2, -1)), {});
    };
  }
  if (name == "find" || name == "rfind" || name == "count") {
    return [s, name](const CallArgs& args, Evaluator&) -> absl::StatusOr<Value> {
      const Value* needle = Positional(args, 0);
      if (needle == nullptr || !needle->is_string())
        return Fail(absl::StrCat(name, ": needs a string"));
      if (name == "count") {
        if (needle->str().empty()) return Value::Int(CodePointCount(s) + 1);
        int64_t n = 0;
        for (size_t at = s.find(needle->str()); at != std::string::npos;
             at = s.find(needle->str(), at + needle->str().size())) {
          ++n;
        }
        return Value::Int(n);
      }
      const size_t at = name == "find" ? s.find(needle->str()) : s.rfind(needle->str());
      if (at == std::string::npos) return Value::Int(-1);
      return Value::Int(CodePointCount(s.substr(0, at)));
    };
  }
  if (name == "join") {
    return [s](const CallArgs& args, Evaluator& ev) -> absl::StatusOr<Value> {
      const Value* items = Positional(args, 0);
      if (items == nullptr) return Fail("join: needs an iterable");
      absl::StatusOr<std::vector<Value>> parts = Iterate(*items, {});
      if (!parts.ok()) return parts.status();
      std::string out;
      for (size_t i = 0; i < parts->size(); ++i) {
        if (!(*parts)[i].is_string()) return Fail("join: sequence item is not a str");
        if (i > 0) out += s;
        out += (*parts)[i].str();
      }
      return ev.MakeString(std::move(out), {});
    };
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const bool prefix = name == "removeprefix";
    return [s, prefix](const CallArgs& args, Evaluator&) -> absl::StatusOr<Value> {
      const Value* affix = Positional(args, 0);
      if (affix == nullptr || !affix->is_string())
        return Fail("removeprefix/removesuffix: needs a string");
      const std::string& a = affix->str();
      if (a.size() > s.size()) return Value::String(s);
      if (prefix && s.compare(0, a.size(), a) == 0) return Value::String(s.substr(a.size()));
      if (!prefix && s.compare(s.size() - a.size(), a.size(), a) == 0) {
        return Value::String(s.substr(0, s.size() - a.size()));
      }
      return Value::String(s);
    };
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
      name == "isupper" || name == "islower") {
    return [s, name](const CallArgs&, Evaluator&) -> absl::StatusOr<Value> {
      const std::vector<char32_t> cps = DecodeUtf8(s);
      if (name == "isupper" || name == "islower") {
        const bool has_cased = PyUpper(s) != PyLower(s);
        return Value::Bool(has_cased && (name == "isupper" ? PyUpper(s) == s : PyLower(s) == s));
      }
      if (cps.empty()) return Value::Bool(false);
      for (char32_t c : cps) {
        const bool ascii_digit = c >= '0' && c <= '9';
        const bool ascii_alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        const bool ok = name == "isdigit"   ? ascii_digit
                        : name == "isalpha" ? ascii_alpha
                        : name == "isalnum" ? ascii_digit || ascii_alpha
                                            : PyIsSpace(c);
        if (!ok) return Value::Bool(false);
      }
      return Value::Bool(true);
    };
  }
  if (name == "format") {
    return [s](const CallArgs& args, Evaluator&) { return Format(s, args); };
  }
  return nullptr;
}

Method DictMethod(const Value& dict, const std::string& name) {
  if (name == "get") {
    return [dict](const CallArgs& args, Evaluator&) -> absl::StatusOr<Value> {
      const Value* key = Positional(args, 0);
      if (key == nullptr) return Fail("get expected at least 1 argument, got 0");
      if (const Value* found = dict.dict().FindKey(*key)) return *found;
      const Value* fallback = Positional(args, 1);
      return fallback == nullptr ? Value::None() : *fallback;
    };
  }
  if (name == "items" || name == "keys" || name == "values") {
    return [dict, name](const CallArgs&, Evaluator&) -> absl::StatusOr<Value> {
      std::vector<Value> out;
      for (const auto& [key, value] : dict.dict().items) {
        if (name == "items") {
          out.push_back(Value::Tuple({key, value}));
        } else {
          out.push_back(name == "keys" ? key : value);
        }
      }
      return Value::List(std::move(out));
    };
  }
  if (name == "copy") {
    return [dict](const CallArgs&, Evaluator&) -> absl::StatusOr<Value> {
      return Value::Dict(dict.dict());
    };
  }
  return nullptr;
}

Method ListMethod(const Value& list, const std::string& name) {
  if (name == "index" || name == "count") {
    return [list, name](const CallArgs& args, Evaluator&) -> absl::StatusOr<Value> {
      const Value* needle = Positional(args, 0);
      if (needle == nullptr) return Fail(absl::StrCat(name, ": needs an argument"));
      int64_t count = 0;
      for (size_t i = 0; i < list.items().size(); ++i) {
        if (!Equal(list.items()[i], *needle)) continue;
        if (name == "index") return Value::Int(static_cast<int64_t>(i));
        ++count;
      }
      if (name == "index") return Fail(absl::StrCat(needle->Repr(), " is not in list"));
      return Value::Int(count);
    };
  }
  return nullptr;
}

bool IsMutator(Value::Kind kind, const std::string& name) {
  static const auto* kDict =
      new absl::flat_hash_set<std::string>{"clear", "pop", "popitem", "setdefault", "update"};
  static const auto* kList = new absl::flat_hash_set<std::string>{
      "append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};
  return kind == Value::Kind::kDict ? kDict->contains(name)
                                    : kind == Value::Kind::kList && kList->contains(name);
}

}  // namespace

Value BoundMethod(const Value& object, const std::string& name) {
  Method method;
  switch (object.kind()) {
    case Value::Kind::kString:
      method = StringMethod(object.str(), name);
      break;
    case Value::Kind::kDict:
      method = DictMethod(object, name);
      break;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      method = ListMethod(object, name);
      break;
    default:
      break;
  }
  if (method == nullptr && IsMutator(object.kind(), name)) {
    const std::string type = object.TypeName();
    method = [type, name](const CallArgs&, Evaluator&) -> absl::StatusOr<Value> {
      return Fail(absl::StrCat("access to attribute '", name, "' of '", type,
                               "' object is unsafe: templates cannot modify lists and dicts"));
    };
  }
  if (method == nullptr)
    return Value::Undefined(
        absl::StrCat("'", object.TypeName(), " object' has no attribute '", name, "'"));
  return Value::Function(name, std::move(method));
}

}  // namespace tpserve::jinja
