#include "model/jinja/evaluator.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/jinja/py_string.h"

namespace tpserve::jinja {
namespace {

absl::Status UndefinedError(const Value& value, const Position& at) {
  return ErrorAt(at, value.undefined_hint());
}

absl::Status TypeError(const std::string& op, const Value& a, const Value& b, const Position& at) {
  return ErrorAt(at, absl::StrCat("unsupported operand type(s) for ", op, ": '", a.TypeName(),
                                  "' and '", b.TypeName(), "'"));
}

bool IsIntLike(const Value& v) { return v.is_integer(); }

absl::StatusOr<Value> IntResult(__int128 r, const Position& at) {
  if (r > std::numeric_limits<int64_t>::max() || r < std::numeric_limits<int64_t>::min()) {
    return ErrorAt(at, "integer overflow");
  }
  return Value::Int(static_cast<int64_t>(r));
}

// Python's floor division and modulo, whose results follow the divisor's sign.
int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

absl::Status ErrorAt(const Position& at, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("line ", at.line, " column ", at.column, ": ", what));
}

const Value* Scope::Find(const std::string& name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

absl::StatusOr<std::vector<Value>> Iterate(const Value& value, const Position& at) {
  switch (value.kind()) {
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kGenerator:
      return value.items();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& [key, item] : value.dict().items) keys.push_back(key);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (char32_t c : DecodeUtf8(value.str())) {
        std::string one;
        AppendUtf8(c, &one);
        chars.push_back(Value::String(std::move(one)));
      }
      return chars;
    }
    case Value::Kind::kUndefined:
      return std::vector<Value>();
    default:
      return ErrorAt(at, absl::StrCat("'", value.TypeName(), "' object is not iterable"));
  }
}

Evaluator::Evaluator(const RenderLimits& limits, std::shared_ptr<Scope> globals)
    : limits_(limits), scope_(std::move(globals)) {}

absl::StatusOr<std::string> Evaluator::Render(const Body& body) {
  std::string out;
  Flow flow = Flow::kNormal;
  if (absl::Status s = Exec(body, &out, &flow); !s.ok()) return s;
  return out;
}

absl::Status Evaluator::Step(const Position& at) {
  if (++steps_ > limits_.max_steps) {
    return ErrorAt(at, absl::StrCat("rendering takes more than ", limits_.max_steps,
                                    " steps (a loop too long for a prompt?)"));
  }
  return absl::OkStatus();
}

absl::Status Evaluator::Append(std::string* out, const std::string& text, const Position& at) {
  if (static_cast<int64_t>(out->size() + text.size()) > limits_.max_output_bytes) {
    return ErrorAt(at,
                   absl::StrCat("the rendered text exceeds ", limits_.max_output_bytes, " bytes"));
  }
  out->append(text);
  return absl::OkStatus();
}

absl::StatusOr<Value> Evaluator::MakeString(std::string s, const Position& at) {
  if (static_cast<int64_t>(s.size()) > limits_.max_output_bytes) {
    return ErrorAt(at, absl::StrCat("a string exceeds ", limits_.max_output_bytes, " bytes"));
  }
  return Value::String(std::move(s));
}

void Evaluator::Assign(const std::string& name, Value value) {
  scope_->vars[name] = std::move(value);
}

absl::Status Evaluator::Exec(const Body& body, std::string* out, Flow* flow) {
  for (const StmtPtr& stmt : body) {
    if (absl::Status s = ExecOne(*stmt, out, flow); !s.ok()) return s;
    if (*flow != Flow::kNormal) return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status Evaluator::ExecOne(const Stmt& stmt, std::string* out, Flow* flow) {
  if (absl::Status s = Step(stmt.position); !s.ok()) return s;
  DepthGuard guard(this);
  if (depth_ > limits_.max_depth) return ErrorAt(stmt.position, "rendering nests too deeply");
  switch (stmt.kind) {
    case Stmt::Kind::kText:
      return Append(out, stmt.text, stmt.position);
    case Stmt::Kind::kOutput: {
      absl::StatusOr<Value> value = Eval(*stmt.expr);
      if (!value.ok()) return value.status();
      return Append(out, value->ToString(), stmt.position);
    }
    case Stmt::Kind::kIf:
      for (size_t i = 0; i < stmt.conditions.size(); ++i) {
        absl::StatusOr<Value> condition = Eval(*stmt.conditions[i]);
        if (!condition.ok()) return condition.status();
        if (condition->Truthy()) return Exec(stmt.bodies[i], out, flow);
      }
      if (stmt.bodies.size() > stmt.conditions.size()) return Exec(stmt.bodies.back(), out, flow);
      return absl::OkStatus();
    case Stmt::Kind::kFor:
      return ExecFor(stmt, out);
    case Stmt::Kind::kSet:
      return ExecSet(stmt);
    case Stmt::Kind::kSetBlock:
    case Stmt::Kind::kFilterBlock: {
      std::string captured;
      Flow inner = Flow::kNormal;
      if (absl::Status s = Exec(stmt.bodies[0], &captured, &inner); !s.ok()) return s;
      Value value = Value::String(std::move(captured));
      if (stmt.expr != nullptr) {
        filter_input_ = value;
        absl::StatusOr<Value> filtered = Eval(*stmt.expr);
        if (!filtered.ok()) return filtered.status();
        value = *std::move(filtered);
      }
      if (stmt.kind == Stmt::Kind::kFilterBlock) {
        return Append(out, value.ToString(), stmt.position);
      }
      Assign(stmt.targets[0], std::move(value));
      return absl::OkStatus();
    }
    case Stmt::Kind::kMacro: {
      std::shared_ptr<Scope> closure = scope_;
      const Stmt* macro = &stmt;
      Assign(stmt.text, Value::Function(stmt.text, [macro, closure](const CallArgs& args,
                                                                    Evaluator& evaluator) {
               return evaluator.CallMacro(*macro, closure, args, macro->position);
             }));
      return absl::OkStatus();
    }
    case Stmt::Kind::kBreak:
      *flow = Flow::kBreak;
      return absl::OkStatus();
    case Stmt::Kind::kContinue:
      *flow = Flow::kContinue;
      return absl::OkStatus();
    case Stmt::Kind::kBlock:
      return Exec(stmt.bodies[0], out, flow);
  }
  return ErrorAt(stmt.position, "unknown statement");
}

namespace {

// Binds a loop or set target list: one name takes the value, several unpack a sequence.
absl::Status Unpack(const std::vector<std::string>& targets, const Value& value, const Position& at,
                    Scope* scope) {
  if (targets.size() == 1) {
    scope->vars[targets[0]] = value;
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<Value>> items = Iterate(value, at);
  if (!items.ok()) return items.status();
  if (items->size() != targets.size()) {
    return ErrorAt(at, absl::StrCat(items->size() < targets.size() ? "not enough" : "too many",
                                    " values to unpack (expected ", targets.size(), ", got ",
                                    items->size(), ")"));
  }
  for (size_t i = 0; i < targets.size(); ++i) scope->vars[targets[i]] = (*items)[i];
  return absl::OkStatus();
}

}  // namespace

absl::Status Evaluator::ExecFor(const Stmt& stmt, std::string* out) {
  absl::StatusOr<Value> iterable = Eval(*stmt.expr);
  if (!iterable.ok()) return iterable.status();
  absl::StatusOr<std::vector<Value>> all = Iterate(*iterable, stmt.expr->position);
  if (!all.ok()) return all.status();
  const std::shared_ptr<Scope> outer = scope_;
  struct Restore {
    Evaluator* self;
    std::shared_ptr<Scope> scope;
    ~Restore() { self->scope_ = scope; }
  } restore{this, outer};

  std::vector<Value> items;
  if (stmt.condition == nullptr) {
    items = *std::move(all);
  } else {
    for (const Value& item : *all) {
      if (absl::Status s = Step(stmt.position); !s.ok()) return s;
      scope_ = std::make_shared<Scope>(Scope{{}, outer});
      if (absl::Status s = Unpack(stmt.targets, item, stmt.position, scope_.get()); !s.ok()) {
        return s;
      }
      absl::StatusOr<Value> keep = Eval(*stmt.condition);
      if (!keep.ok()) return keep.status();
      if (keep->Truthy()) items.push_back(item);
    }
  }
  if (items.empty()) {
    scope_ = std::make_shared<Scope>(Scope{{}, outer});
    Flow flow = Flow::kNormal;
    return Exec(stmt.bodies[1], out, &flow);
  }
  const int64_t length = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < length; ++i) {
    // An iteration is a step even when its body is empty, so nested loops stay bounded.
    if (absl::Status s = Step(stmt.position); !s.ok()) return s;
    scope_ = std::make_shared<Scope>(Scope{{}, outer});
    if (absl::Status s = Unpack(stmt.targets, items[i], stmt.position, scope_.get()); !s.ok()) {
      return s;
    }
    ValueDict loop;
    loop.items.emplace_back(Value::String("index"), Value::Int(i + 1));
    loop.items.emplace_back(Value::String("index0"), Value::Int(i));
    loop.items.emplace_back(Value::String("revindex"), Value::Int(length - i));
    loop.items.emplace_back(Value::String("revindex0"), Value::Int(length - i - 1));
    loop.items.emplace_back(Value::String("first"), Value::Bool(i == 0));
    loop.items.emplace_back(Value::String("last"), Value::Bool(i == length - 1));
    loop.items.emplace_back(Value::String("length"), Value::Int(length));
    loop.items.emplace_back(Value::String("depth"), Value::Int(1));
    loop.items.emplace_back(Value::String("depth0"), Value::Int(0));
    if (i > 0) loop.items.emplace_back(Value::String("previtem"), items[i - 1]);
    if (i + 1 < length) loop.items.emplace_back(Value::String("nextitem"), items[i + 1]);
    loop.items.emplace_back(
        Value::String("cycle"),
        Value::Function("cycle", [i](const CallArgs& args, Evaluator&) -> absl::StatusOr<Value> {
          if (args.positional.empty()) {
            return absl::InvalidArgumentError("loop.cycle: no items to cycle");
          }
          return args.positional[static_cast<size_t>(i) % args.positional.size()];
        }));
    scope_->vars["loop"] = Value::Dict(std::move(loop));
    Flow flow = Flow::kNormal;
    if (absl::Status s = Exec(stmt.bodies[0], out, &flow); !s.ok()) return s;
    if (flow == Flow::kBreak) break;
  }
  return absl::OkStatus();
}

absl::Status Evaluator::ExecSet(const Stmt& stmt) {
  absl::StatusOr<Value> value = Eval(*stmt.expr);
  if (!value.ok()) return value.status();
  if (!stmt.attribute.empty()) {
    const Value* target = scope_->Find(stmt.targets[0]);
    if (target == nullptr || target->kind() != Value::Kind::kNamespace) {
      return ErrorAt(stmt.position,
                     absl::StrCat("cannot assign attribute '", stmt.attribute, "' on '",
                                  stmt.targets[0], "': only namespace() objects take attributes"));
    }
    target->mutable_namespace().Set(stmt.attribute, *std::move(value));
    return absl::OkStatus();
  }
  return Unpack(stmt.targets, *value, stmt.position, scope_.get());
}

absl::StatusOr<Value> Evaluator::CallMacro(const Stmt& macro, std::shared_ptr<Scope> closure,
                                           const CallArgs& args, const Position& at) {
  if (call_depth_ >= limits_.max_call_depth) {
    return ErrorAt(at, absl::StrCat("macro calls nest deeper than ", limits_.max_call_depth));
  }
  const std::vector<std::string>& params = macro.targets;
  if (args.positional.size() > params.size()) {
    return ErrorAt(at, absl::StrCat("macro '", macro.text, "' takes not more than ", params.size(),
                                    " argument(s)"));
  }
  auto scope = std::make_shared<Scope>(Scope{{}, std::move(closure)});
  std::vector<bool> bound(params.size(), false);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    scope->vars[params[i]] = args.positional[i];
    bound[i] = true;
  }
  for (const auto& [key, value] : args.keyword) {
    size_t i = 0;
    while (i < params.size() && params[i] != key) ++i;
    if (i == params.size()) {
      return ErrorAt(
          at, absl::StrCat("macro '", macro.text, "' takes no keyword argument '", key, "'"));
    }
    scope->vars[key] = value;
    bound[i] = true;
  }
  std::shared_ptr<Scope> saved = scope_;
  scope_ = scope;
  ++call_depth_;
  absl::Status status;
  const size_t first_default = params.size() - macro.defaults.size();
  for (size_t i = 0; i < params.size() && status.ok(); ++i) {
    if (bound[i]) continue;
    if (i >= first_default) {
      absl::StatusOr<Value> value = Eval(*macro.defaults[i - first_default]);
      if (!value.ok()) {
        status = value.status();
      } else {
        scope->vars[params[i]] = *std::move(value);
      }
    } else {
      scope->vars[params[i]] =
          Value::Undefined(absl::StrCat("parameter '", params[i], "' was not provided"));
    }
  }
  std::string out;
  if (status.ok()) {
    Flow flow = Flow::kNormal;
    status = Exec(macro.bodies[0], &out, &flow);
  }
  --call_depth_;
  scope_ = saved;
  if (!status.ok()) return status;
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Evaluator::Call(const Value& callee, const CallArgs& args,
                                      const Position& at) {
  if (callee.is_undefined()) return UndefinedError(callee, at);
  if (callee.kind() != Value::Kind::kCallable) {
    return ErrorAt(at, absl::StrCat("'", callee.TypeName(), "' object is not callable"));
  }
  absl::StatusOr<Value> result = callee.callable().call(args, *this);
  if (!result.ok() && result.status().message().rfind("line ", 0) != 0) {
    return ErrorAt(at, result.status().message());
  }
  return result;
}

absl::StatusOr<Value> Evaluator::ApplyFilter(const std::string& name, const Value& input,
                                             const CallArgs& args, const Position& at) {
  return RunFilter(*this, name, input, args, at);
}

absl::StatusOr<bool> Evaluator::ApplyTest(const std::string& name, const Value& input,
                                          const CallArgs& args, const Position& at) {
  return RunTest(*this, name, input, args, at);
}

absl::StatusOr<Value> Evaluator::GetAttribute(const Value& object, const std::string& name,
                                              const Position& at) {
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      return UndefinedError(object, at);
    case Value::Kind::kDict: {
      Value method = BoundMethod(object, name);
      if (!method.is_undefined()) return method;
      if (const Value* item = object.dict().Find(name)) return *item;
      return Value::Undefined(absl::StrCat("'dict object' has no attribute '", name, "'"));
    }
    case Value::Kind::kNamespace:
      if (const Value* item = object.dict().Find(name)) return *item;
      return Value::Undefined(absl::StrCat("'Namespace' object has no attribute '", name, "'"));
    default: {
      Value method = BoundMethod(object, name);
      if (!method.is_undefined()) return method;
      return Value::Undefined(
          absl::StrCat("'", object.TypeName(), " object' has no attribute '", name, "'"));
    }
  }
}

absl::StatusOr<Value> Evaluator::GetItem(const Value& object, const Value& key,
                                         const Position& at) {
  if (object.is_undefined()) return UndefinedError(object, at);
  if (object.kind() == Value::Kind::kDict) {
    if (const Value* item = object.dict().FindKey(key)) return *item;
  }
  if ((object.is_sequence() || object.is_string()) && IsIntLike(key)) {
    const int64_t length = object.is_string() ? CodePointCount(object.str())
                                              : static_cast<int64_t>(object.items().size());
    int64_t index = key.int_value();
    if (index < 0) index += length;
    if (index < 0 || index >= length) {
      return Value::Undefined(absl::StrCat("index ", key.int_value(), " is out of range"));
    }
    if (object.is_sequence()) return object.items()[static_cast<size_t>(index)];
    std::string one;
    AppendUtf8(DecodeUtf8(object.str())[static_cast<size_t>(index)], &one);
    return Value::String(std::move(one));
  }
  if (key.is_string()) {
    if (object.kind() == Value::Kind::kDict) {
      Value method = BoundMethod(object, key.str());
      if (!method.is_undefined()) return method;
      return Value::Undefined(absl::StrCat("'dict object' has no attribute '", key.str(), "'"));
    }
    return GetAttribute(object, key.str(), at);
  }
  return Value::Undefined(
      absl::StrCat("'", object.TypeName(), " object' has no element ", key.Repr()));
}

absl::StatusOr<CallArgs> Evaluator::EvalArgs(const Expr& expr, size_t first) {
  CallArgs args;
  for (size_t i = first; i < expr.args.size(); ++i) {
    absl::StatusOr<Value> value = Eval(*expr.args[i]);
    if (!value.ok()) return value.status();
    args.positional.push_back(*std::move(value));
  }
  for (const auto& [key, arg] : expr.keyword) {
    absl::StatusOr<Value> value = Eval(*arg);
    if (!value.ok()) return value.status();
    args.keyword.emplace_back(key, *std::move(value));
  }
  return args;
}

absl::StatusOr<Value> Evaluator::EvalSlice(const Expr& expr) {
  absl::StatusOr<Value> target = Eval(*expr.args[0]);
  if (!target.ok()) return target;
  int64_t bounds[3] = {0, 0, 1};
  const int64_t* present[3] = {nullptr, nullptr, nullptr};
  for (int i = 0; i < 3; ++i) {
    if (expr.args[i + 1] == nullptr) continue;
    absl::StatusOr<Value> bound = Eval(*expr.args[i + 1]);
    if (!bound.ok()) return bound;
    if (bound->is_none()) continue;
    if (!IsIntLike(*bound)) {
      return ErrorAt(expr.position, "slice indices must be integers or None");
    }
    bounds[i] = bound->int_value();
    present[i] = &bounds[i];
  }
  if (bounds[2] == 0) return ErrorAt(expr.position, "slice step cannot be zero");
  if (target->is_undefined()) return UndefinedError(*target, expr.position);
  if (target->is_sequence()) {
    std::vector<Value> out;
    for (int64_t i : SliceIndices(static_cast<int64_t>(target->items().size()), present[0],
                                  present[1], bounds[2])) {
      out.push_back(target->items()[static_cast<size_t>(i)]);
    }
    return target->kind() == Value::Kind::kTuple ? Value::Tuple(std::move(out))
                                                 : Value::List(std::move(out));
  }
  if (target->is_string()) {
    const std::vector<char32_t> cps = DecodeUtf8(target->str());
    std::vector<char32_t> out;
    for (int64_t i :
         SliceIndices(static_cast<int64_t>(cps.size()), present[0], present[1], bounds[2])) {
      out.push_back(cps[static_cast<size_t>(i)]);
    }
    return Value::String(EncodeUtf8(out));
  }
  return Value::Undefined(absl::StrCat("'", target->TypeName(), "' object cannot be sliced"));
}

absl::StatusOr<Value> Evaluator::Eval(const Expr& expr) {
  if (absl::Status s = Step(expr.position); !s.ok()) return s;
  DepthGuard guard(this);
  if (depth_ > limits_.max_depth) return ErrorAt(expr.position, "rendering nests too deeply");
  switch (expr.kind) {
    case Expr::Kind::kLiteral:
      return expr.value;
    case Expr::Kind::kName: {
      if (const Value* value = scope_->Find(expr.name)) return *value;
      return Value::Undefined(absl::StrCat("'", expr.name, "' is undefined"));
    }
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      std::vector<Value> items;
      for (const ExprPtr& item : expr.args) {
        absl::StatusOr<Value> value = Eval(*item);
        if (!value.ok()) return value;
        items.push_back(*std::move(value));
      }
      return expr.kind == Expr::Kind::kList ? Value::List(std::move(items))
                                            : Value::Tuple(std::move(items));
    }
    case Expr::Kind::kDict: {
      ValueDict dict;
      for (size_t i = 0; i + 1 < expr.args.size(); i += 2) {
        absl::StatusOr<Value> key = Eval(*expr.args[i]);
        if (!key.ok()) return key;
        if (key->is_sequence() || key->is_dict() || key->kind() == Value::Kind::kGenerator) {
          return ErrorAt(expr.args[i]->position,
                         absl::StrCat("unhashable type: '", key->TypeName(), "'"));
        }
        absl::StatusOr<Value> value = Eval(*expr.args[i + 1]);
        if (!value.ok()) return value;
        dict.SetKey(*std::move(key), *std::move(value));
      }
      return Value::Dict(std::move(dict));
    }
    case Expr::Kind::kAttribute: {
      absl::StatusOr<Value> object = Eval(*expr.args[0]);
      if (!object.ok()) return object;
      return GetAttribute(*object, expr.name, expr.position);
    }
    case Expr::Kind::kItem: {
      absl::StatusOr<Value> object = Eval(*expr.args[0]);
      if (!object.ok()) return object;
      absl::StatusOr<Value> key = Eval(*expr.args[1]);
      if (!key.ok()) return key;
      return GetItem(*object, *key, expr.position);
    }
    case Expr::Kind::kSlice:
      return EvalSlice(expr);
    case Expr::Kind::kCall: {
      absl::StatusOr<Value> callee = Eval(*expr.args[0]);
      if (!callee.ok()) return callee;
      absl::StatusOr<CallArgs> args = EvalArgs(expr, 1);
      if (!args.ok()) return args.status();
      return Call(*callee, *args, expr.position);
    }
    case Expr::Kind::kFilter: {
      Value input = filter_input_;
      if (expr.args[0] != nullptr) {
        absl::StatusOr<Value> value = Eval(*expr.args[0]);
        if (!value.ok()) return value;
        input = *std::move(value);
      }
      absl::StatusOr<CallArgs> args = EvalArgs(expr, 1);
      if (!args.ok()) return args.status();
      return RunFilter(*this, expr.name, input, *args, expr.position);
    }
    case Expr::Kind::kTest: {
      absl::StatusOr<Value> input = Eval(*expr.args[0]);
      if (!input.ok()) return input;
      absl::StatusOr<CallArgs> args = EvalArgs(expr, 1);
      if (!args.ok()) return args.status();
      absl::StatusOr<bool> result = RunTest(*this, expr.name, *input, *args, expr.position);
      if (!result.ok()) return result.status();
      return Value::Bool(*result != expr.negated);
    }
    case Expr::Kind::kUnary: {
      absl::StatusOr<Value> operand = Eval(*expr.args[0]);
      if (!operand.ok()) return operand;
      if (expr.name == "not") return Value::Bool(!operand->Truthy());
      if (operand->is_undefined()) return UndefinedError(*operand, expr.position);
      if (!operand->is_number()) {
        return ErrorAt(expr.position, absl::StrCat("bad operand type for unary ", expr.name, ": '",
                                                   operand->TypeName(), "'"));
      }
      if (expr.name == "+") {
        return operand->kind() == Value::Kind::kFloat ? *operand : Value::Int(operand->int_value());
      }
      if (operand->kind() == Value::Kind::kFloat) return Value::Float(-operand->number());
      return IntResult(-static_cast<__int128>(operand->int_value()), expr.position);
    }
    case Expr::Kind::kBinary:
      return EvalBinary(expr);
    case Expr::Kind::kCompare:
      return EvalCompare(expr);
    case Expr::Kind::kCondition: {
      absl::StatusOr<Value> condition = Eval(*expr.args[0]);
      if (!condition.ok()) return condition;
      if (condition->Truthy()) return Eval(*expr.args[1]);
      if (expr.args[2] == nullptr) {
        return Value::Undefined("the conditional expression has no else branch");
      }
      return Eval(*expr.args[2]);
    }
  }
  return ErrorAt(expr.position, "unknown expression");
}

absl::StatusOr<Value> Evaluator::EvalBinary(const Expr& expr) {
  const std::string& op = expr.name;
  const Position& at = expr.position;
  absl::StatusOr<Value> left = Eval(*expr.args[0]);
  if (!left.ok()) return left;
  if (op == "and" || op == "or") {
    if (left->Truthy() == (op == "or")) return left;
    return Eval(*expr.args[1]);
  }
  absl::StatusOr<Value> right_or = Eval(*expr.args[1]);
  if (!right_or.ok()) return right_or;
  const Value& a = *left;
  const Value& b = *right_or;
  if (op == "~") return MakeString(a.ToString() + b.ToString(), at);
  if (a.is_undefined()) return UndefinedError(a, at);
  if (b.is_undefined()) return UndefinedError(b, at);
  if (a.is_number() && b.is_number()) {
    const bool ints = a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat;
    const __int128 x = a.int_value(), y = b.int_value();
    const double fx = a.number(), fy = b.number();
    if (op == "+") return ints ? IntResult(x + y, at) : Value::Float(fx + fy);
    if (op == "-") return ints ? IntResult(x - y, at) : Value::Float(fx - fy);
    if (op == "*") return ints ? IntResult(x * y, at) : Value::Float(fx * fy);
    if (op == "/") {
      if (fy == 0) return ErrorAt(at, "division by zero");
      return Value::Float(fx / fy);
    }
    if (op == "//" || op == "%") {
      if (fy == 0) return ErrorAt(at, "integer division or modulo by zero");
      if (ints) {
        const int64_t q = FloorDiv(a.int_value(), b.int_value());
        if (op == "//") return Value::Int(q);
        return IntResult(x - static_cast<__int128>(q) * y, at);
      }
      const double q = std::floor(fx / fy);
      return Value::Float(op == "//" ? q : fx - q * fy);
    }
    if (op == "**") {
      if (ints && y >= 0) {
        __int128 r = 1;
        for (__int128 i = 0; i < y; ++i) {
          r *= x;
          if (r > std::numeric_limits<int64_t>::max() || r < std::numeric_limits<int64_t>::min()) {
            return ErrorAt(at, "integer overflow");
          }
        }
        return Value::Int(static_cast<int64_t>(r));
      }
      return Value::Float(std::pow(fx, fy));
    }
  }
  if (op == "+" && a.is_string() && b.is_string()) {
    if (!a.is_safe() && !b.is_safe()) return MakeString(a.str() + b.str(), at);
    absl::StatusOr<Value> joined = MakeString((a.is_safe() ? a.str() : HtmlEscape(a.str())) +
                                                  (b.is_safe() ? b.str() : HtmlEscape(b.str())),
                                              at);
    if (!joined.ok()) return joined;
    return Value::SafeString(joined->str());
  }
  if (op == "+" && a.is_sequence() && a.kind() == b.kind()) {
    std::vector<Value> items = a.items();
    items.insert(items.end(), b.items().begin(), b.items().end());
    return a.kind() == Value::Kind::kTuple ? Value::Tuple(std::move(items))
                                           : Value::List(std::move(items));
  }
  if (op == "*" && (((a.is_string() || a.is_sequence()) && IsIntLike(b)) ||
                    ((b.is_string() || b.is_sequence()) && IsIntLike(a)))) {
    const Value& seq = IsIntLike(b) ? a : b;
    const int64_t count = std::max<int64_t>(0, (IsIntLike(b) ? b : a).int_value());
    const int64_t unit = seq.is_string() ? static_cast<int64_t>(seq.str().size())
                                         : static_cast<int64_t>(seq.items().size()) * 16;
    if (unit > 0 && count > limits_.max_output_bytes / unit) {
      return ErrorAt(at, absl::StrCat("repeating a ", seq.TypeName(), " ", count,
                                      " times exceeds the output limit"));
    }
    if (seq.is_string()) {
      std::string out;
      for (int64_t i = 0; i < count; ++i) out += seq.str();
      return Value::String(std::move(out));
    }
    std::vector<Value> items;
    for (int64_t i = 0; i < count; ++i)
      items.insert(items.end(), seq.items().begin(), seq.items().end());
    return seq.kind() == Value::Kind::kTuple ? Value::Tuple(std::move(items))
                                             : Value::List(std::move(items));
  }
  if (op == "%" && a.is_string()) {
    return ErrorAt(at, "unsupported construct: printf-style '%' string formatting");
  }
  return TypeError(op, a, b, at);
}

namespace {

absl::StatusOr<bool> Contains(const Value& container, const Value& item, const Position& at) {
  switch (container.kind()) {
    case Value::Kind::kString:
      if (!item.is_string()) {
        return ErrorAt(at, absl::StrCat("'in <string>' requires string as left operand, not ",
                                        item.TypeName()));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      for (const Value& v : container.items()) {
        if (Equal(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return container.dict().FindKey(item) != nullptr;
    case Value::Kind::kGenerator:
      for (const Value& v : container.items()) {
        if (Equal(v, item)) return true;
      }
      return false;
    case Value::Kind::kUndefined:
      return false;
    default:
      return ErrorAt(at,
                     absl::StrCat("argument of type '", container.TypeName(), "' is not iterable"));
  }
}

}  // namespace

absl::StatusOr<bool> CompareValues(const std::string& op, const Value& a, const Value& b,
                                   const Position& at) {
  if (op == "==") return Equal(a, b);
  if (op == "!=") return !Equal(a, b);
  if (op == "in") return Contains(b, a, at);
  if (op == "not in") {
    absl::StatusOr<bool> in = Contains(b, a, at);
    if (!in.ok()) return in;
    return !*in;
  }
  if (a.is_undefined()) return ErrorAt(at, a.undefined_hint());
  if (b.is_undefined()) return ErrorAt(at, b.undefined_hint());
  absl::StatusOr<bool> result = op == "<" || op == ">=" ? Less(a, b) : Less(b, a);
  if (!result.ok()) return ErrorAt(at, result.status().message());
  if (op == "<" || op == ">") return *result;
  return !*result;
}

absl::StatusOr<Value> Evaluator::EvalCompare(const Expr& expr) {
  absl::StatusOr<Value> left = Eval(*expr.args[0]);
  if (!left.ok()) return left;
  Value current = *std::move(left);
  for (size_t i = 0; i < expr.ops.size(); ++i) {
    absl::StatusOr<Value> right = Eval(*expr.args[i + 1]);
    if (!right.ok()) return right;
    absl::StatusOr<bool> holds = CompareValues(expr.ops[i], current, *right, expr.position);
    if (!holds.ok()) return holds.status();
    if (!*holds) return Value::Bool(false);
    current = *std::move(right);
  }
  return Value::Bool(true);
}

}  // namespace tpserve::jinja
