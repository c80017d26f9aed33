#include "model/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/json_escape.h"
#include "model/jinja/py_string.h"

namespace tpserve::jinja {
namespace {

void AppendRepr(const Value& value, std::string* out);

void AppendStringRepr(const std::string& s, std::string* out) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  out->push_back(quote);
  for (char32_t c : DecodeUtf8(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '\r') {
      out->append("\\r");
    } else if (c == '\t') {
      out->append("\\t");
    } else if (c < 0x20 || (c >= 0x7F && c < 0xA0) || (c >= 0xDC80 && c <= 0xDCFF)) {
      char buffer[8];
      std::snprintf(buffer, sizeof(buffer), "\\x%02x", static_cast<unsigned>(c & 0xFF));
      out->append(buffer);
    } else {
      AppendUtf8(c, out);
    }
  }
  out->push_back(quote);
}

void AppendRepr(const Value& value, std::string* out) {
  switch (value.kind()) {
    case Value::Kind::kString:
      AppendStringRepr(value.str(), out);
      return;
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      const bool tuple = value.kind() == Value::Kind::kTuple;
      out->push_back(tuple ? '(' : '[');
      for (size_t i = 0; i < value.items().size(); ++i) {
        if (i > 0) out->append(", ");
        AppendRepr(value.items()[i], out);
      }
      if (tuple && value.items().size() == 1) out->push_back(',');
      out->push_back(tuple ? ')' : ']');
      return;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      if (value.kind() == Value::Kind::kNamespace) out->append("<Namespace ");
      out->push_back('{');
      bool first = true;
      for (const auto& [key, item] : value.dict().items) {
        if (!first) out->append(", ");
        first = false;
        AppendRepr(key, out);
        out->append(": ");
        AppendRepr(item, out);
      }
      out->push_back('}');
      if (value.kind() == Value::Kind::kNamespace) out->push_back('>');
      return;
    }
    default:
      out->append(value.ToString());
  }
}

void AppendJsonString(const std::string& s, bool ensure_ascii, std::string* out);

// json.dumps turns non-string keys into strings; other key types are an error.
absl::StatusOr<std::string> JsonKey(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString:
      return key.str();
    case Value::Kind::kNone:
      return std::string("null");
    case Value::Kind::kBool:
      return std::string(key.bool_value() ? "true" : "false");
    case Value::Kind::kInt:
      return absl::StrCat(key.int_value());
    case Value::Kind::kFloat:
      return PyFloatRepr(key.number());
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tojson: keys must be str, int, float, bool or None, not ", key.TypeName()));
  }
}

void AppendJsonString(const std::string& s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (char32_t c : DecodeUtf8(s)) {
    if (const char* escape = ShortJsonEscape(c); escape != nullptr) {
      out->append(escape);
    } else if (c >= 0x10000 && ensure_ascii) {
      const char32_t v = c - 0x10000;
      AppendJsonUnicodeEscape(0xD800 + (v >> 10), out);
      AppendJsonUnicodeEscape(0xDC00 + (v & 0x3FF), out);
    } else if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
      AppendJsonUnicodeEscape(c, out);
    } else {
      AppendUtf8(c, out);
    }
  }
  out->push_back('"');
}

absl::Status AppendJson(const Value& value, const JsonDumpOptions& options, int depth,
                        std::string* out) {
  if (depth > 512) return absl::InvalidArgumentError("tojson: value nested too deeply");
  const std::string& item_separator = options.item_separator.empty()
                                          ? (options.indent >= 0 ? std::string(",") : ", ")
                                          : options.item_separator;
  auto newline = [&](int level) {
    if (options.indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(options.indent) * level, ' ');
  };
  switch (value.kind()) {
    case Value::Kind::kNone:
      out->append("null");
      return absl::OkStatus();
    case Value::Kind::kBool:
      out->append(value.bool_value() ? "true" : "false");
      return absl::OkStatus();
    case Value::Kind::kInt:
      absl::StrAppend(out, value.int_value());
      return absl::OkStatus();
    case Value::Kind::kFloat: {
      const double f = value.number();
      out->append(std::isnan(f)   ? "NaN"
                  : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity")
                                  : PyFloatRepr(f));
      return absl::OkStatus();
    }
    case Value::Kind::kString:
      AppendJsonString(value.str(), options.ensure_ascii, out);
      return absl::OkStatus();
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      if (value.items().empty()) {
        out->append("[]");
        return absl::OkStatus();
      }
      out->push_back('[');
      for (size_t i = 0; i < value.items().size(); ++i) {
        if (i > 0) out->append(item_separator);
        newline(depth + 1);
        if (absl::Status s = AppendJson(value.items()[i], options, depth + 1, out); !s.ok()) {
          return s;
        }
      }
      newline(depth);
      out->push_back(']');
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      if (value.dict().items.empty()) {
        out->append("{}");
        return absl::OkStatus();
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [key, item] : value.dict().items) {
        absl::StatusOr<std::string> text = JsonKey(key);
        if (!text.ok()) return text.status();
        entries.emplace_back(*std::move(text), &item);
      }
      if (options.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out->append(item_separator);
        newline(depth + 1);
        AppendJsonString(entries[i].first, options.ensure_ascii, out);
        out->append(options.key_separator);
        if (absl::Status s = AppendJson(*entries[i].second, options, depth + 1, out); !s.ok()) {
          return s;
        }
      }
      newline(depth);
      out->push_back('}');
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tojson: Object of type ", value.TypeName(), " is not JSON serializable"));
  }
}

}  // namespace

const Value* ValueDict::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

const Value* ValueDict::FindKey(const Value& key) const {
  if (key.is_string()) return Find(key.str());
  for (const auto& [k, v] : items) {
    if (Equal(k, key)) return &v;
  }
  return nullptr;
}

void ValueDict::Set(std::string key, Value value) {
  SetKey(Value::String(std::move(key)), std::move(value));
}

void ValueDict::SetKey(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (Equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

Value Value::Undefined(std::string hint) {
  Value v;
  v.string_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.int_ = b ? 1 : 0;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.int_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.float_ = f;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.string_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::SafeString(std::string s) {
  Value v = String(std::move(s));
  v.safe_ = true;
  return v;
}
Value Value::List(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<const std::vector<Value>>(std::move(items));
  return v;
}
Value Value::Tuple(std::vector<Value> items) {
  Value v = List(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}
Value Value::Generator(std::vector<Value> items) {
  Value v = List(std::move(items));
  v.kind_ = Kind::kGenerator;
  return v;
}
Value Value::Dict(ValueDict dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<ValueDict>(std::move(dict));
  return v;
}
Value Value::Namespace(ValueDict dict) {
  Value v = Dict(std::move(dict));
  v.kind_ = Kind::kNamespace;
  return v;
}
Value Value::Function(std::string name,
                      std::function<absl::StatusOr<Value>(const CallArgs&, Evaluator&)> call) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.callable_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(call)});
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Int(static_cast<int64_t>(u));
      return Float(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Float(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return String(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(FromJson(item));
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict dict;
      for (const auto& [key, item] : json.items()) dict.Set(key, FromJson(item));
      return Dict(std::move(dict));
    }
    default:
      return None();
  }
}

const std::string& Value::undefined_hint() const {
  static const std::string* const kUnnamed = new std::string("a value is undefined");
  return string_ == nullptr ? *kUnnamed : *string_;
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0;
    case Kind::kString:
      return !string_->empty();
    case Kind::kList:
    case Kind::kTuple:
      return !list_->empty();
    case Kind::kDict:
      return !dict_->items.empty();
    default:
      return true;
  }
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kTuple:
      return "tuple";
    case Kind::kGenerator:
      return "generator";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

std::string Value::ToString() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return int_ != 0 ? "True" : "False";
    case Kind::kInt:
      return absl::StrCat(int_);
    case Kind::kFloat:
      return PyFloatRepr(float_);
    case Kind::kString:
      return *string_;
    case Kind::kCallable:
      return absl::StrCat("<function ", callable_->name, ">");
    case Kind::kGenerator:
      return "<generator object>";
    default: {
      std::string out;
      AppendRepr(*this, &out);
      return out;
    }
  }
}

std::string Value::Repr() const {
  std::string out;
  AppendRepr(*this, &out);
  return out;
}

int64_t Value::Length() const {
  switch (kind_) {
    case Kind::kString:
      return CodePointCount(*string_);
    case Kind::kList:
    case Kind::kTuple:
      return static_cast<int64_t>(list_->size());
    case Kind::kDict:
    case Kind::kNamespace:
      return static_cast<int64_t>(dict_->items.size());
    case Kind::kUndefined:
      return 0;
    default:
      return -1;
  }
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat) {
      return a.int_value() == b.int_value();
    }
    return a.number() == b.number();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.str() == b.str();
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      if (a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i) {
        if (!Equal(a.items()[i], b.items()[i])) return false;
      }
      return true;
    case Value::Kind::kDict:
      if (a.dict().items.size() != b.dict().items.size()) return false;
      for (const auto& [key, item] : a.dict().items) {
        const Value* other = b.dict().FindKey(key);
        if (other == nullptr || !Equal(item, *other)) return false;
      }
      return true;
    case Value::Kind::kNamespace:
      return &a.dict() == &b.dict();
    case Value::Kind::kCallable:
      return &a.callable() == &b.callable();
    default:
      return false;
  }
}

absl::StatusOr<bool> Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat) {
      return a.int_value() < b.int_value();
    }
    return a.number() < b.number();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.kind() == b.kind() && a.is_sequence()) {
    const size_t n = std::min(a.items().size(), b.items().size());
    for (size_t i = 0; i < n; ++i) {
      if (Equal(a.items()[i], b.items()[i])) continue;
      return Less(a.items()[i], b.items()[i]);
    }
    return a.items().size() < b.items().size();
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

std::string PyFloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0) return std::signbit(value) ? "-0.0" : "0.0";
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  std::string sci(buffer, result.ptr);  // "-d.ddde[+-]XX"
  const size_t e = sci.find('e');
  const int exponent = std::atoi(sci.c_str() + e + 1);
  std::string digits;
  const bool negative = sci[0] == '-';
  for (size_t i = negative ? 1 : 0; i < e; ++i) {
    if (sci[i] != '.') digits.push_back(sci[i]);
  }
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  if (exponent < 0) {
    return out + "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  }
  const size_t integer_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= integer_digits) {
    return out + digits + std::string(integer_digits - digits.size(), '0') + ".0";
  }
  return out + digits.substr(0, integer_digits) + "." + digits.substr(integer_digits);
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

absl::StatusOr<std::string> JsonDumps(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  if (absl::Status s = AppendJson(value, options, 0, &out); !s.ok()) return s;
  return out;
}

}  // namespace tpserve::jinja
