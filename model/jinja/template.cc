#include "model/jinja/template.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "model/jinja/parser.h"

namespace tpserve::jinja {
namespace {

// jinja2's sandbox refuses ranges longer than this.
constexpr int64_t kMaxRange = 100'000;

absl::StatusOr<Value> Range(const CallArgs& args) {
  if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 3) {
    return absl::InvalidArgumentError("range expects 1 to 3 integer arguments");
  }
  for (const Value& v : args.positional) {
    if (!v.is_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("range: '", v.TypeName(), "' object cannot be interpreted as an integer"));
    }
  }
  const size_t n = args.positional.size();
  const int64_t start = n == 1 ? 0 : args.positional[0].int_value();
  const int64_t stop = n == 1 ? args.positional[0].int_value() : args.positional[1].int_value();
  const int64_t step = n == 3 ? args.positional[2].int_value() : 1;
  if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
  const __int128 span =
      step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  const __int128 count =
      span <= 0 ? 0 : (span + (step > 0 ? step : -step) - 1) / (step > 0 ? step : -step);
  if (count > kMaxRange) {
    return absl::InvalidArgumentError(
        absl::StrCat("range too big, the sandbox allows at most ", kMaxRange, " items"));
  }
  std::vector<Value> items;
  for (__int128 i = 0; i < count; ++i)
    items.push_back(Value::Int(static_cast<int64_t>(start + i * step)));
  return Value::List(std::move(items));
}

absl::StatusOr<ValueDict> DictFromArgs(const CallArgs& args, const std::string& function) {
  ValueDict dict;
  if (args.positional.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(function, " takes at most one positional argument"));
  }
  if (!args.positional.empty()) {
    const Value& initial = args.positional[0];
    if (!initial.is_dict()) {
      return absl::InvalidArgumentError(absl::StrCat(function, ": the argument is not a mapping"));
    }
    dict = initial.dict();
  }
  for (const auto& [key, value] : args.keyword) dict.Set(key, value);
  return dict;
}

}  // namespace

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  absl::StatusOr<Body> body = jinja::Parse(absl::string_view(source.data(), source.size()));
  if (!body.ok()) return body.status();
  return Template(std::make_shared<const Body>(*std::move(body)));
}

absl::StatusOr<std::string> Template::Render(const ValueDict& variables,
                                             const RenderOptions& options) const {
  auto globals = std::make_shared<Scope>();
  globals->vars["range"] =
      Value::Function("range", [](const CallArgs& args, Evaluator&) { return Range(args); });
  globals->vars["namespace"] =
      Value::Function("namespace", [](const CallArgs& args, Evaluator&) -> absl::StatusOr<Value> {
        absl::StatusOr<ValueDict> dict = DictFromArgs(args, "namespace");
        if (!dict.ok()) return dict.status();
        return Value::Namespace(*std::move(dict));
      });
  globals->vars["dict"] =
      Value::Function("dict", [](const CallArgs& args, Evaluator&) -> absl::StatusOr<Value> {
        absl::StatusOr<ValueDict> dict = DictFromArgs(args, "dict");
        if (!dict.ok()) return dict.status();
        return Value::Dict(*std::move(dict));
      });
  globals->vars["raise_exception"] = Value::Function(
      "raise_exception", [](const CallArgs& args, Evaluator&) -> absl::StatusOr<Value> {
        const std::string message =
            args.positional.empty() ? std::string() : args.positional[0].ToString();
        return absl::InvalidArgumentError(
            absl::StrCat("the chat template refused the conversation: ", message));
      });
  std::tm now{};
  if (options.now.has_value()) {
    now = *options.now;
  } else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &now);
  }
  globals->vars["strftime_now"] = Value::Function(
      "strftime_now", [now](const CallArgs& args, Evaluator&) -> absl::StatusOr<Value> {
        if (args.positional.size() != 1 || !args.positional[0].is_string()) {
          return absl::InvalidArgumentError("strftime_now expects one format string");
        }
        const std::string& format = args.positional[0].str();
        if (format.size() > 256) return absl::InvalidArgumentError("strftime_now: format too long");
        char buffer[4096];
        const size_t n = std::strftime(buffer, sizeof(buffer), format.c_str(), &now);
        if (n == 0 && !format.empty()) {
          return absl::InvalidArgumentError("strftime_now: the formatted date is too long");
        }
        return Value::String(std::string(buffer, n));
      });
  for (const auto& [name, value] : variables.items) globals->vars[name.ToString()] = value;
  Evaluator evaluator(options.limits, std::move(globals));
  return evaluator.Render(*body_);
}

}  // namespace tpserve::jinja
