// The values a Jinja template computes with, modelled on the Python objects that jinja2 hands
// around, because chat templates are written against Python's semantics: `{{ [1, 'a'] }}` prints
// "[1, 'a']", `1 == 1.0`, `'x' + none` is an error, `undefined.attr` is an error while
// `none.attr` is undefined. Lists and dicts are shared and immutable once built (the HF
// environment is an ImmutableSandboxedEnvironment); only namespace() objects are mutable.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tpserve::jinja {

class Value;
class Evaluator;

// Insertion-ordered map, as Python dicts are. Keys are strings, except in dict literals of a
// template ({0: 'a'}); keys equal under Python's == are one key.
struct ValueDict {
  std::vector<std::pair<Value, Value>> items;

  const Value* Find(std::string_view key) const;
  const Value* FindKey(const Value& key) const;
  void Set(std::string key, Value value);
  void SetKey(Value key, Value value);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A function the template can call: a global (range, raise_exception), a bound method
// ('a b'.split) or a macro. It receives the evaluator so that macros can render their body.
struct Callable {
  std::string name;
  std::function<absl::StatusOr<Value>(const CallArgs&, Evaluator&)> call;
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kGenerator,  // what map/select/items/reverse give: iterable once, no len(), always true
    kDict,
    kNamespace,
    kCallable
  };

  Value() = default;  // undefined
  static Value Undefined(std::string hint);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  // markupsafe's Markup, which `|safe` and `|escape` give: adding a plain string to it escapes
  // that string's HTML characters.
  static Value SafeString(std::string s);
  static Value List(std::vector<Value> items);
  static Value Tuple(std::vector<Value> items);
  static Value Generator(std::vector<Value> items);
  static Value Dict(ValueDict dict);
  static Value Namespace(ValueDict dict);
  static Value Function(std::string name,
                        std::function<absl::StatusOr<Value>(const CallArgs&, Evaluator&)> call);
  // JSON objects keep their key order; numbers stay integers when they are integers.
  static Value FromJson(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_safe() const { return safe_; }
  bool is_number() const {
    return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
  }
  bool is_integer() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }
  bool is_sequence() const { return kind_ == Kind::kList || kind_ == Kind::kTuple; }
  bool is_dict() const { return kind_ == Kind::kDict; }

  bool bool_value() const { return int_ != 0; }
  int64_t int_value() const { return int_; }  // bools are 0/1 as in Python
  double number() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& str() const { return *string_; }
  const std::vector<Value>& items() const { return *list_; }
  const ValueDict& dict() const { return *dict_; }
  ValueDict& mutable_namespace() const { return *dict_; }
  const Callable& callable() const { return *callable_; }
  // What an undefined value stands for ("'x' is undefined"), for error messages.
  const std::string& undefined_hint() const;

  bool Truthy() const;
  // Python's type name ("str", "dict", "NoneType"), for error messages.
  std::string TypeName() const;
  // Python's str() and repr(); undefined prints as "".
  std::string ToString() const;
  std::string Repr() const;
  // Length of strings in code points, of lists and dicts in items; -1 for the rest.
  int64_t Length() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool safe_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> string_;  // kString; for kUndefined, its hint (may be null)
  std::shared_ptr<const std::vector<Value>> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<const Callable> callable_;
};

// Python's ==: numbers across int/float/bool, lists and tuples element-wise (a list never equals
// a tuple), dicts regardless of order, undefined equals undefined.
bool Equal(const Value& a, const Value& b);
// Python's <; an error for types that do not order ("'<' not supported between ...").
absl::StatusOr<bool> Less(const Value& a, const Value& b);

// markupsafe's escape(): & < > " ' as entities.
std::string HtmlEscape(const std::string& s);

// Python's repr(float): the shortest digits that round-trip, "1.0", "1e-05", "inf".
std::string PyFloatRepr(double value);

struct JsonDumpOptions {
  int indent = -1;             // < 0: one line
  std::string item_separator;  // empty: Python's default for the indent
  std::string key_separator = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
};
// Python's json.dumps, which Hugging Face's `tojson` filter calls; undefined, namespaces and
// functions are not serializable (an error, as in Python).
absl::StatusOr<std::string> JsonDumps(const Value& value, const JsonDumpOptions& options);

}  // namespace tpserve::jinja
