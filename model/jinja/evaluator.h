// Renders a parsed template: walks the statement tree with jinja2's scoping (a for loop's
// iterations and a macro's body are scopes of their own; if-blocks and set-blocks are not),
// Python's operator semantics (value.h) and jinja2's default Undefined: printing it gives "",
// it is falsy and iterates as empty, while arithmetic on it, calling it or taking an attribute
// or item of it is an error.
//
// Every error is an INVALID_ARGUMENT naming the construct and its line and column. Rendering
// is bounded: output size, evaluation steps (so loops cannot run forever), macro call depth,
// and the size of strings and lists a template builds.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/jinja/ast.h"
#include "model/jinja/value.h"

namespace tpserve::jinja {

struct RenderLimits {
  int64_t max_output_bytes = 16 << 20;  // the rendered text, and any string built on the way
  int64_t max_steps = 5'000'000;        // expressions, statements and loop iterations
  int max_call_depth = 64;              // macro calls inside macro calls
  int max_depth = 1000;                 // nested evaluations, macro bodies included: the stack
};

// Variables of one scope; lookups fall through to the parent.
struct Scope {
  absl::flat_hash_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;

  const Value* Find(const std::string& name) const;
};

class Evaluator {
 public:
  Evaluator(const RenderLimits& limits, std::shared_ptr<Scope> globals);

  absl::StatusOr<std::string> Render(const Body& body);

  // For filters, tests and callables (builtins.cc, methods.cc).
  absl::StatusOr<Value> Call(const Value& callee, const CallArgs& args, const Position& at);
  absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& input,
                                    const CallArgs& args, const Position& at);
  absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& input, const CallArgs& args,
                                 const Position& at);
  // jinja2's getattr (attribute first, then item) and getitem (item first, then attribute).
  absl::StatusOr<Value> GetAttribute(const Value& object, const std::string& name,
                                     const Position& at);
  absl::StatusOr<Value> GetItem(const Value& object, const Value& key, const Position& at);
  // A string result checked against max_output_bytes.
  absl::StatusOr<Value> MakeString(std::string s, const Position& at);
  const RenderLimits& limits() const { return limits_; }

  // Renders a macro body in a fresh scope under `closure`, as a call does.
  absl::StatusOr<Value> CallMacro(const Stmt& macro, std::shared_ptr<Scope> closure,
                                  const CallArgs& args, const Position& at);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct DepthGuard {
    explicit DepthGuard(Evaluator* e) : evaluator(e) { ++evaluator->depth_; }
    ~DepthGuard() { --evaluator->depth_; }
    Evaluator* evaluator;
  };

  absl::Status Exec(const Body& body, std::string* out, Flow* flow);
  absl::Status ExecOne(const Stmt& stmt, std::string* out, Flow* flow);
  absl::Status ExecFor(const Stmt& stmt, std::string* out);
  absl::Status ExecSet(const Stmt& stmt);
  absl::Status Append(std::string* out, const std::string& text, const Position& at);

  absl::StatusOr<Value> Eval(const Expr& expr);
  absl::StatusOr<Value> EvalBinary(const Expr& expr);
  absl::StatusOr<Value> EvalCompare(const Expr& expr);
  absl::StatusOr<CallArgs> EvalArgs(const Expr& expr, size_t first);
  absl::StatusOr<Value> EvalSlice(const Expr& expr);
  absl::Status Step(const Position& at);

  void Assign(const std::string& name, Value value);

  RenderLimits limits_;
  std::shared_ptr<Scope> scope_;
  Value filter_input_;  // the rendered body a {% filter %} or block set's chain starts from
  int64_t steps_ = 0;
  int depth_ = 0;  // Eval and ExecOne frames on the stack
  int call_depth_ = 0;
};

absl::Status ErrorAt(const Position& at, absl::string_view what);
// `a op b` for ==, !=, <, <=, >, >=, in, not in, with Python's semantics.
absl::StatusOr<bool> CompareValues(const std::string& op, const Value& a, const Value& b,
                                   const Position& at);

// Python's list(value) for a for loop or a filter: strings give their characters, dicts their
// keys, undefined nothing; anything else is an error.
absl::StatusOr<std::vector<Value>> Iterate(const Value& value, const Position& at);

// Filters, tests and methods (builtins.cc, methods.cc).
absl::StatusOr<Value> RunFilter(Evaluator& evaluator, const std::string& name, const Value& input,
                                const CallArgs& args, const Position& at);
absl::StatusOr<bool> RunTest(Evaluator& evaluator, const std::string& name, const Value& input,
                             const CallArgs& args, const Position& at);
// The bound method `object.name` of a str, list or dict; undefined when it has none.
Value BoundMethod(const Value& object, const std::string& name);

}  // namespace tpserve::jinja
