#include "model/jinja/known_names.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace tpserve::jinja {
namespace {

// jinja2 refuses a template naming an unknown filter or test when it compiles it, except inside
// an `if` (its test and branches) or a conditional expression, where the error waits until the
// filter runs; a for loop or macro body inside such a branch is strict again.
absl::Status CheckNames(const Expr* expr, bool soft) {
  if (expr == nullptr) return absl::OkStatus();
  soft = soft || expr->kind == Expr::Kind::kCondition;
  if (!soft && expr->kind == Expr::Kind::kFilter && !IsKnownFilter(expr->name)) {
    return absl::InvalidArgumentError(absl::StrCat("line ", expr->position.line, " column ",
                                                   expr->position.column, ": unsupported filter '",
                                                   expr->name, "'"));
  }
  if (!soft && expr->kind == Expr::Kind::kTest && !IsKnownTest(expr->name)) {
    return absl::InvalidArgumentError(absl::StrCat("line ", expr->position.line, " column ",
                                                   expr->position.column, ": unsupported test '",
                                                   expr->name, "'"));
  }
  for (const ExprPtr& arg : expr->args) {
    if (absl::Status s = CheckNames(arg.get(), soft); !s.ok()) return s;
  }
  for (const auto& [key, arg] : expr->keyword) {
    if (absl::Status s = CheckNames(arg.get(), soft); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckNames(const Body& body, bool soft) {
  for (const StmtPtr& stmt : body) {
    const bool is_if = stmt->kind == Stmt::Kind::kIf;
    const bool strict_body = stmt->kind == Stmt::Kind::kFor || stmt->kind == Stmt::Kind::kMacro;
    for (const Expr* e : {stmt->expr.get(), stmt->condition.get()}) {
      if (absl::Status s = CheckNames(e, soft); !s.ok()) return s;
    }
    for (const ExprPtr& e : stmt->conditions) {
      if (absl::Status s = CheckNames(e.get(), soft || is_if); !s.ok()) return s;
    }
    for (const ExprPtr& e : stmt->defaults) {
      if (absl::Status s = CheckNames(e.get(), false); !s.ok()) return s;
    }
    for (const Body& inner : stmt->bodies) {
      if (absl::Status s = CheckNames(inner, strict_body ? false : soft || is_if); !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool IsKnownFilter(absl::string_view name) {
  static const auto* kFilters = new absl::flat_hash_set<absl::string_view>{
      "abs",    "attr",       "capitalize", "count",   "d",       "default", "dictsort",
      "e",      "escape",     "first",      "float",   "indent",  "int",     "items",
      "join",   "last",       "length",     "list",    "lower",   "map",     "max",
      "min",    "reject",     "rejectattr", "replace", "reverse", "round",   "safe",
      "select", "selectattr", "sort",       "string",  "sum",     "title",   "tojson",
      "trim",   "unique",     "upper"};
  return kFilters->contains(name);
}

bool IsKnownTest(absl::string_view name) {
  static const auto* kTests = new absl::flat_hash_set<absl::string_view>{
      "boolean", "callable", "defined",  "divisibleby", "eq",       "equalto", "escaped",
      "even",    "false",    "filter",   "float",       "ge",       "gt",      "greaterthan",
      "in",      "integer",  "iterable", "le",          "lessthan", "lower",   "lt",
      "mapping", "ne",       "none",     "number",      "odd",      "sameas",  "sequence",
      "string",  "test",     "true",     "undefined",   "upper",    "==",      "!=",
      "<",       "<=",       ">",        ">="};
  return kTests->contains(name);
}

absl::Status CheckFilterAndTestNames(const Body& body) { return CheckNames(body, /*soft=*/false); }

}  // namespace tpserve::jinja
