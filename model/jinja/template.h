// A Jinja template parsed once and rendered many times, as Hugging Face transformers renders
// chat templates: jinja2's ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks,
// loop controls, its `tojson` (ensure_ascii=False), and the globals `raise_exception(msg)`,
// `strftime_now(fmt)`, plus jinja2's `range`, `namespace` and `dict`.
//
// Parse() refuses what the interpreter cannot run, naming the construct and its line and
// column; Render() errors (including raise_exception's message) are INVALID_ARGUMENT.
// Thread-safe: a Template is immutable; each Render has its own state.
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "model/jinja/ast.h"
#include "model/jinja/evaluator.h"
#include "model/jinja/value.h"

namespace tpserve::jinja {

struct RenderOptions {
  RenderLimits limits;
  // What strftime_now formats; unset: the local time at the call.
  std::optional<std::tm> now;
};

class Template {
 public:
  static absl::StatusOr<Template> Parse(std::string_view source);

  absl::StatusOr<std::string> Render(const ValueDict& variables,
                                     const RenderOptions& options = {}) const;

 private:
  explicit Template(std::shared_ptr<const Body> body) : body_(std::move(body)) {}

  std::shared_ptr<const Body> body_;
};

}  // namespace tpserve::jinja
