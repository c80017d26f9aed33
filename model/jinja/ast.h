// The parsed template: expression and statement trees. Owned by Template, read-only while
// rendering (one parsed template serves concurrent renders).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/jinja/lexer.h"
#include "model/jinja/value.h"

namespace tpserve::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // value
    kName,       // name
    kList,       // args: items
    kTuple,      // args: items
    kDict,       // keyword: key expressions in args, values in args (pairs: 2i, 2i+1)
    kAttribute,  // args[0].name
    kItem,       // args[0][args[1]]
    kSlice,      // args[0][args[1]:args[2]:args[3]], missing bounds null
    kCall,       // args[0](args[1..], keyword)
    kFilter,     // args[0] | name(args[1..], keyword); args[0] null inside {% filter %}
    kTest,       // args[0] is [not] name(args[1..]); `negated`
    kUnary,      // name ("-", "+", "not") args[0]
    kBinary,     // args[0] name args[1]: + - * / // % ** ~ and or
    kCompare,    // args[0] ops[0] args[1] ops[1] args[2] ...
    kCondition,  // args[1] if args[0] else args[2] (args[2] null: undefined)
  };
  Kind kind;
  Position position;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // conditions[i] → bodies[i]; bodies.back() is the else branch when it has one
    kFor,          // for targets in expr [if condition]: bodies[0], else bodies[1]
    kSet,          // targets (or namespace_name.attribute) = expr
    kSetBlock,     // {% set targets[0] | filter %}bodies[0]{% endset %}; expr: the filter chain
    kMacro,        // name(targets, defaults aligned to the last parameters) bodies[0]
    kFilterBlock,  // {% filter expr %}bodies[0]{% endfilter %}
    kBreak,
    kContinue,
    kBlock,  // a block rendered in place ({% generation %}): bodies[0]
  };
  Kind kind;
  Position position;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  std::vector<std::string> targets;
  std::string attribute;  // {% set ns.attribute = ... %}
  std::vector<ExprPtr> defaults;
};

}  // namespace tpserve::jinja
