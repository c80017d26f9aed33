#include "model/jinja/parser.h"

#include <cerrno>
#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "model/jinja/known_names.h"

namespace tpserve::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  absl::StatusOr<Body> ParseTemplate() {
    std::string ended_by;
    absl::StatusOr<Body> body = ParseBody({}, &ended_by);
    if (!body.ok()) return body.status();
    return body;
  }

 private:
  using Kind = Token::Kind;

  const Token& Peek(size_t ahead = 0) const {
    const size_t at = std::min(pos_ + ahead, tokens_.size() - 1);
    return tokens_[at];
  }
  const Token& Next() {
    const Token& t = Peek();
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool IsOp(absl::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == Kind::kOperator && Peek(ahead).text == op;
  }
  bool IsName(absl::string_view name, size_t ahead = 0) const {
    return Peek(ahead).kind == Kind::kName && Peek(ahead).text == name;
  }
  bool SkipOp(absl::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(absl::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }

  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case Kind::kText:
        return "template text";
      case Kind::kVarBegin:
        return "'{{'";
      case Kind::kVarEnd:
        return "'}}'";
      case Kind::kBlockBegin:
        return "'{%'";
      case Kind::kBlockEnd:
        return "'%}'";
      case Kind::kString:
        return "a string";
      case Kind::kEnd:
        return "the end of the template";
      default:
        return absl::StrCat("'", t.text, "'");
    }
  }

  absl::Status ErrorAt(const Position& p, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", p.line, " column ", p.column, ": ", what));
  }
  absl::Status Unexpected(absl::string_view expected) const {
    return ErrorAt(Peek().position,
                   absl::StrCat("expected ", expected, ", found ", Describe(Peek())));
  }
  absl::Status ExpectOp(absl::string_view op) {
    if (!SkipOp(op)) return Unexpected(absl::StrCat("'", op, "'"));
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Peek().kind != Kind::kBlockEnd) return Unexpected("'%}'");
    Next();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName(absl::string_view what) {
    if (Peek().kind != Kind::kName) return Unexpected(what);
    return Next().text;
  }

  // Guards recursion; `depth_` is restored by the guard's owner.
  absl::Status Enter() {
    if (++depth_ > kMaxNestingDepth) {
      return ErrorAt(Peek().position,
                     absl::StrCat("the template nests deeper than ", kMaxNestingDepth, " levels"));
    }
    return absl::OkStatus();
  }
  struct DepthGuard {
    int* depth;
    ~DepthGuard() { --*depth; }
  };

  // Statements until a block tag whose keyword is in `enders` (consumed up to the keyword, which
  // goes to `ended_by`), or the end of the template when `enders` is empty.
  absl::StatusOr<Body> ParseBody(const std::vector<absl::string_view>& enders,
                                 std::string* ended_by) {
    if (absl::Status s = Enter(); !s.ok()) return s;
    DepthGuard guard{&depth_};
    Body body;
    while (true) {
      const Token& t = Peek();
      if (t.kind == Kind::kEnd) {
        if (enders.empty()) return body;
        return ErrorAt(t.position,
                       absl::StrCat("the template ends before '{% ", enders.back(), " %}'"));
      }
      if (t.kind == Kind::kText) {
        auto stmt = NewStmt(Stmt::Kind::kText, t.position);
        stmt->text = Next().text;
        body.push_back(std::move(stmt));
        continue;
      }
      if (t.kind == Kind::kVarBegin) {
        Next();
        auto stmt = NewStmt(Stmt::Kind::kOutput, t.position);
        absl::StatusOr<ExprPtr> expr = ParseExpression();
        if (!expr.ok()) return expr.status();
        stmt->expr = *std::move(expr);
        if (Peek().kind != Kind::kVarEnd) return Unexpected("'}}'");
        Next();
        body.push_back(std::move(stmt));
        continue;
      }
      if (t.kind != Kind::kBlockBegin) return Unexpected("text, '{{' or '{%'");
      const Token& keyword = Peek(1);
      if (keyword.kind != Kind::kName) {
        Next();
        return Unexpected("a statement name");
      }
      for (absl::string_view ender : enders) {
        if (keyword.text == ender) {
          Next();
          *ended_by = Next().text;
          return body;
        }
      }
      Next();
      absl::StatusOr<StmtPtr> stmt = ParseStatement();
      if (!stmt.ok()) return stmt.status();
      body.push_back(*std::move(stmt));
    }
  }

  StmtPtr NewStmt(Stmt::Kind kind, const Position& p) {
    auto stmt = std::make_unique<Stmt>();
    stmt->kind = kind;
    stmt->position = p;
    return stmt;
  }

  absl::StatusOr<StmtPtr> ParseStatement() {
    const Token keyword = Next();
    const std::string& k = keyword.text;
    if (k == "if") return ParseIf(keyword.position);
    if (k == "for") return ParseFor(keyword.position);
    if (k == "set") return ParseSet(keyword.position);
    if (k == "macro") return ParseMacro(keyword.position);
    if (k == "filter") return ParseFilterBlock(keyword.position);
    if (k == "generation") return ParseSimpleBlock(keyword.position, "endgeneration");
    if (k == "break" || k == "continue") {
      if (loop_depth_ == 0) {
        return ErrorAt(keyword.position, absl::StrCat("'", k, "' outside a for loop"));
      }
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      return NewStmt(k == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, keyword.position);
    }
    if (k.rfind("end", 0) == 0 || k == "elif" || k == "else") {
      return ErrorAt(keyword.position, absl::StrCat("'{% ", k, " %}' without its opening block"));
    }
    return ErrorAt(keyword.position, absl::StrCat("unsupported construct '{% ", k, " %}'"));
  }

  absl::StatusOr<StmtPtr> ParseIf(const Position& p) {
    auto stmt = NewStmt(Stmt::Kind::kIf, p);
    while (true) {
      absl::StatusOr<ExprPtr> condition = ParseExpression();
      if (!condition.ok()) return condition.status();
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      std::string ended_by;
      absl::StatusOr<Body> body = ParseBody({"elif", "else", "endif"}, &ended_by);
      if (!body.ok()) return body.status();
      stmt->conditions.push_back(*std::move(condition));
      stmt->bodies.push_back(*std::move(body));
      if (ended_by == "elif") continue;
      if (ended_by == "else") {
        if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
        absl::StatusOr<Body> else_body = ParseBody({"endif"}, &ended_by);
        if (!else_body.ok()) return else_body.status();
        stmt->bodies.push_back(*std::move(else_body));
      }
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      return stmt;
    }
  }

  absl::StatusOr<std::vector<std::string>> ParseTargets() {
    std::vector<std::string> targets;
    const bool parenthesized = SkipOp("(");
    do {
      absl::StatusOr<std::string> name = ExpectName("a variable name");
      if (!name.ok()) return name.status();
      targets.push_back(*name);
    } while (SkipOp(","));
    if (parenthesized) {
      if (absl::Status s = ExpectOp(")"); !s.ok()) return s;
    }
    return targets;
  }

  absl::StatusOr<StmtPtr> ParseFor(const Position& p) {
    auto stmt = NewStmt(Stmt::Kind::kFor, p);
    absl::StatusOr<std::vector<std::string>> targets = ParseTargets();
    if (!targets.ok()) return targets.status();
    stmt->targets = *std::move(targets);
    if (!SkipName("in")) return Unexpected("'in'");
    absl::StatusOr<ExprPtr> iterable = ParseTupleOr(/*with_condition=*/false);
    if (!iterable.ok()) return iterable.status();
    stmt->expr = *std::move(iterable);
    if (SkipName("if")) {
      absl::StatusOr<ExprPtr> condition = ParseExpression();
      if (!condition.ok()) return condition.status();
      stmt->condition = *std::move(condition);
    }
    if (IsName("recursive")) return ErrorAt(Peek().position, "unsupported construct 'recursive'");
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    ++loop_depth_;
    std::string ended_by;
    absl::StatusOr<Body> body = ParseBody({"else", "endfor"}, &ended_by);
    --loop_depth_;
    if (!body.ok()) return body.status();
    stmt->bodies.push_back(*std::move(body));
    if (ended_by == "else") {
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      absl::StatusOr<Body> else_body = ParseBody({"endfor"}, &ended_by);
      if (!else_body.ok()) return else_body.status();
      stmt->bodies.push_back(*std::move(else_body));
    } else {
      stmt->bodies.emplace_back();
    }
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    return stmt;
  }

  absl::StatusOr<StmtPtr> ParseSet(const Position& p) {
    auto stmt = NewStmt(Stmt::Kind::kSet, p);
    if (Peek().kind == Kind::kName && IsOp(".", 1)) {
      stmt->targets.push_back(Next().text);
      Next();
      absl::StatusOr<std::string> attribute = ExpectName("an attribute name");
      if (!attribute.ok()) return attribute.status();
      stmt->attribute = *attribute;
    } else {
      absl::StatusOr<std::vector<std::string>> targets = ParseTargets();
      if (!targets.ok()) return targets.status();
      stmt->targets = *std::move(targets);
    }
    if (SkipOp("=")) {
      absl::StatusOr<ExprPtr> value = ParseTupleOr(/*with_condition=*/true);
      if (!value.ok()) return value.status();
      stmt->expr = *std::move(value);
      if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
      return stmt;
    }
    if (stmt->targets.size() != 1 || !stmt->attribute.empty()) return Unexpected("'='");
    stmt->kind = Stmt::Kind::kSetBlock;
    if (IsOp("|")) {
      absl::StatusOr<ExprPtr> filters = ParseFilterChain(nullptr);
      if (!filters.ok()) return filters.status();
      stmt->expr = *std::move(filters);
    }
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    std::string ended_by;
    absl::StatusOr<Body> body = ParseBody({"endset"}, &ended_by);
    if (!body.ok()) return body.status();
    stmt->bodies.push_back(*std::move(body));
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    return stmt;
  }

  absl::StatusOr<StmtPtr> ParseMacro(const Position& p) {
    auto stmt = NewStmt(Stmt::Kind::kMacro, p);
    absl::StatusOr<std::string> name = ExpectName("a macro name");
    if (!name.ok()) return name.status();
    stmt->text = *name;
    if (absl::Status s = ExpectOp("("); !s.ok()) return s;
    while (!IsOp(")")) {
      absl::StatusOr<std::string> param = ExpectName("a parameter name");
      if (!param.ok()) return param.status();
      stmt->targets.push_back(*param);
      if (SkipOp("=")) {
        absl::StatusOr<ExprPtr> value = ParseExpression();
        if (!value.ok()) return value.status();
        stmt->defaults.push_back(*std::move(value));
      } else if (!stmt->defaults.empty()) {
        return ErrorAt(Peek().position, "a parameter without a default after one with a default");
      }
      if (!SkipOp(",")) break;
    }
    if (absl::Status s = ExpectOp(")"); !s.ok()) return s;
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    std::string ended_by;
    absl::StatusOr<Body> body = ParseBody({"endmacro"}, &ended_by);
    loop_depth_ = saved_loops;
    if (!body.ok()) return body.status();
    stmt->bodies.push_back(*std::move(body));
    if (Peek().kind == Kind::kName && Peek().text == stmt->text) Next();
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    return stmt;
  }

  absl::StatusOr<StmtPtr> ParseFilterBlock(const Position& p) {
    auto stmt = NewStmt(Stmt::Kind::kFilterBlock, p);
    absl::StatusOr<ExprPtr> filters = ParseFilterChain(nullptr, /*first_pipe=*/false);
    if (!filters.ok()) return filters.status();
    stmt->expr = *std::move(filters);
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    std::string ended_by;
    absl::StatusOr<Body> body = ParseBody({"endfilter"}, &ended_by);
    if (!body.ok()) return body.status();
    stmt->bodies.push_back(*std::move(body));
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    return stmt;
  }

  absl::StatusOr<StmtPtr> ParseSimpleBlock(const Position& p, absl::string_view end) {
    auto stmt = NewStmt(Stmt::Kind::kBlock, p);
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    std::string ended_by;
    absl::StatusOr<Body> body = ParseBody({end}, &ended_by);
    if (!body.ok()) return body.status();
    stmt->bodies.push_back(*std::move(body));
    if (absl::Status s = ExpectBlockEnd(); !s.ok()) return s;
    return stmt;
  }

  // --- expressions -------------------------------------------------------------------------

  ExprPtr NewExpr(Expr::Kind kind, const Position& p) {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->position = p;
    return expr;
  }

  // An expression, or several separated by commas (an implicit tuple), as in `set` and `for`.
  absl::StatusOr<ExprPtr> ParseTupleOr(bool with_condition) {
    const Position p = Peek().position;
    absl::StatusOr<ExprPtr> first = with_condition ? ParseExpression() : ParseOr();
    if (!first.ok() || !IsOp(",")) return first;
    auto tuple = NewExpr(Expr::Kind::kTuple, p);
    tuple->args.push_back(*std::move(first));
    while (SkipOp(",")) {
      if (Peek().kind == Kind::kBlockEnd || IsName("if")) break;
      absl::StatusOr<ExprPtr> item = with_condition ? ParseExpression() : ParseOr();
      if (!item.ok()) return item.status();
      tuple->args.push_back(*std::move(item));
    }
    return tuple;
  }

  absl::StatusOr<ExprPtr> ParseExpression() {
    if (absl::Status s = Enter(); !s.ok()) return s;
    DepthGuard guard{&depth_};
    absl::StatusOr<ExprPtr> value = ParseOr();
    if (!value.ok()) return value;
    ExprPtr expr = *std::move(value);
    while (IsName("if")) {
      const Position p = Next().position;
      absl::StatusOr<ExprPtr> condition = ParseOr();
      if (!condition.ok()) return condition;
      auto node = NewExpr(Expr::Kind::kCondition, p);
      node->args.push_back(*std::move(condition));
      node->args.push_back(std::move(expr));
      if (SkipName("else")) {
        absl::StatusOr<ExprPtr> otherwise = ParseExpression();
        if (!otherwise.ok()) return otherwise;
        node->args.push_back(*std::move(otherwise));
      } else {
        node->args.push_back(nullptr);
      }
      expr = std::move(node);
    }
    return expr;
  }

  ExprPtr Binary(std::string op, ExprPtr left, ExprPtr right, const Position& p) {
    auto node = NewExpr(Expr::Kind::kBinary, p);
    node->name = std::move(op);
    node->args.push_back(std::move(left));
    node->args.push_back(std::move(right));
    return node;
  }

  // One left-associative level: operands from `next`, operators from `ops` (names or symbols).
  template <typename NextFn>
  absl::StatusOr<ExprPtr> ParseLevel(std::initializer_list<absl::string_view> ops, bool names,
                                     NextFn next) {
    absl::StatusOr<ExprPtr> left = (this->*next)();
    if (!left.ok()) return left;
    ExprPtr expr = *std::move(left);
    while (true) {
      std::string matched;
      for (absl::string_view op : ops) {
        if (names ? IsName(op) : IsOp(op)) matched = std::string(op);
      }
      if (matched.empty()) return expr;
      const Position p = Next().position;
      absl::StatusOr<ExprPtr> right = (this->*next)();
      if (!right.ok()) return right;
      expr = Binary(matched, std::move(expr), *std::move(right), p);
    }
  }

  absl::StatusOr<ExprPtr> ParseOr() { return ParseLevel({"or"}, true, &Parser::ParseAnd); }
  absl::StatusOr<ExprPtr> ParseAnd() { return ParseLevel({"and"}, true, &Parser::ParseNot); }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (!IsName("not")) return ParseCompare();
    const Position p = Next().position;
    if (absl::Status s = Enter(); !s.ok()) return s;
    DepthGuard guard{&depth_};
    absl::StatusOr<ExprPtr> operand = ParseNot();
    if (!operand.ok()) return operand;
    auto node = NewExpr(Expr::Kind::kUnary, p);
    node->name = "not";
    node->args.push_back(*std::move(operand));
    return node;
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    const Position p = Peek().position;
    absl::StatusOr<ExprPtr> first = ParseAdd();
    if (!first.ok()) return first;
    ExprPtr node;
    while (true) {
      std::string op;
      if (Peek().kind == Kind::kOperator &&
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" || Peek().text == ">" ||
           Peek().text == "<=" || Peek().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        Next();
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        Next();
        Next();
        op = "not in";
      } else {
        break;
      }
      absl::StatusOr<ExprPtr> right = ParseAdd();
      if (!right.ok()) return right;
      if (node == nullptr) {
        node = NewExpr(Expr::Kind::kCompare, p);
        node->args.push_back(*std::move(first));
      }
      node->ops.push_back(op);
      node->args.push_back(*std::move(right));
    }
    if (node == nullptr) return first;
    return node;
  }

  absl::StatusOr<ExprPtr> ParseAdd() { return ParseLevel({"+", "-"}, false, &Parser::ParseConcat); }
  absl::StatusOr<ExprPtr> ParseConcat() { return ParseLevel({"~"}, false, &Parser::ParseMul); }
  absl::StatusOr<ExprPtr> ParseMul() {
    return ParseLevel({"*", "/", "//", "%"}, false, &Parser::ParsePow);
  }
  absl::StatusOr<ExprPtr> ParsePow() {
    return ParseLevel({"**"}, false, &Parser::ParseUnaryFiltered);
  }
  absl::StatusOr<ExprPtr> ParseUnaryFiltered() { return ParseUnary(true); }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    if (absl::Status s = Enter(); !s.ok()) return s;
    DepthGuard guard{&depth_};
    ExprPtr expr;
    if (IsOp("-") || IsOp("+")) {
      const Token& op = Next();
      auto node = NewExpr(Expr::Kind::kUnary, op.position);
      node->name = op.text;
      absl::StatusOr<ExprPtr> operand = ParseUnary(false);
      if (!operand.ok()) return operand;
      node->args.push_back(*std::move(operand));
      expr = std::move(node);
    } else {
      absl::StatusOr<ExprPtr> primary = ParsePrimary();
      if (!primary.ok()) return primary;
      absl::StatusOr<ExprPtr> postfix = ParsePostfix(*std::move(primary));
      if (!postfix.ok()) return postfix;
      expr = *std::move(postfix);
    }
    if (!with_filter) return expr;
    return ParseFilterChain(std::move(expr));
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Peek();
    switch (t.kind) {
      case Kind::kName: {
        Next();
        auto node = NewExpr(Expr::Kind::kLiteral, t.position);
        if (t.text == "true" || t.text == "True") {
          node->value = Value::Bool(true);
        } else if (t.text == "false" || t.text == "False") {
          node->value = Value::Bool(false);
        } else if (t.text == "none" || t.text == "None") {
          node->value = Value::None();
        } else {
          node->kind = Expr::Kind::kName;
          node->name = t.text;
        }
        return node;
      }
      case Kind::kString: {
        auto node = NewExpr(Expr::Kind::kLiteral, t.position);
        std::string text;
        while (Peek().kind == Kind::kString) text += Next().text;
        node->value = Value::String(std::move(text));
        return node;
      }
      case Kind::kInt: {
        Next();
        auto node = NewExpr(Expr::Kind::kLiteral, t.position);
        int64_t i;
        if (absl::SimpleAtoi(t.text, &i)) {
          node->value = Value::Int(i);
        } else {
          return ErrorAt(t.position, absl::StrCat("integer literal ", t.text, " is too large"));
        }
        return node;
      }
      case Kind::kFloat: {
        Next();
        auto node = NewExpr(Expr::Kind::kLiteral, t.position);
        node->value = Value::Float(std::strtod(t.text.c_str(), nullptr));
        return node;
      }
      case Kind::kOperator:
        if (t.text == "(") return ParseParenthesized();
        if (t.text == "[") return ParseList();
        if (t.text == "{") return ParseDict();
        break;
      default:
        break;
    }
    return Unexpected("an expression");
  }

  absl::StatusOr<ExprPtr> ParseParenthesized() {
    const Position p = Next().position;
    if (SkipOp(")")) return NewExpr(Expr::Kind::kTuple, p);
    absl::StatusOr<ExprPtr> first = ParseExpression();
    if (!first.ok()) return first;
    if (SkipOp(")")) return first;
    auto tuple = NewExpr(Expr::Kind::kTuple, p);
    tuple->args.push_back(*std::move(first));
    while (SkipOp(",")) {
      if (IsOp(")")) break;
      absl::StatusOr<ExprPtr> item = ParseExpression();
      if (!item.ok()) return item;
      tuple->args.push_back(*std::move(item));
    }
    if (absl::Status s = ExpectOp(")"); !s.ok()) return s;
    return tuple;
  }

  absl::StatusOr<ExprPtr> ParseList() {
    auto list = NewExpr(Expr::Kind::kList, Next().position);
    while (!IsOp("]")) {
      absl::StatusOr<ExprPtr> item = ParseExpression();
      if (!item.ok()) return item;
      list->args.push_back(*std::move(item));
      if (!SkipOp(",")) break;
    }
    if (absl::Status s = ExpectOp("]"); !s.ok()) return s;
    return list;
  }

  absl::StatusOr<ExprPtr> ParseDict() {
    auto dict = NewExpr(Expr::Kind::kDict, Next().position);
    while (!IsOp("}")) {
      absl::StatusOr<ExprPtr> key = ParseExpression();
      if (!key.ok()) return key;
      if (absl::Status s = ExpectOp(":"); !s.ok()) return s;
      absl::StatusOr<ExprPtr> value = ParseExpression();
      if (!value.ok()) return value;
      dict->args.push_back(*std::move(key));
      dict->args.push_back(*std::move(value));
      if (!SkipOp(",")) break;
    }
    if (absl::Status s = ExpectOp("}"); !s.ok()) return s;
    return dict;
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr expr) {
    while (true) {
      if (IsOp(".")) {
        const Position p = Next().position;
        const Token& t = Peek();
        if (t.kind == Kind::kName) {
          auto node = NewExpr(Expr::Kind::kAttribute, p);
          node->name = Next().text;
          node->args.push_back(std::move(expr));
          expr = std::move(node);
        } else if (t.kind == Kind::kInt) {
          auto node = NewExpr(Expr::Kind::kItem, p);
          node->args.push_back(std::move(expr));
          auto index = NewExpr(Expr::Kind::kLiteral, t.position);
          int64_t i = 0;
          if (!absl::SimpleAtoi(Next().text, &i)) return ErrorAt(t.position, "index too large");
          index->value = Value::Int(i);
          node->args.push_back(std::move(index));
          expr = std::move(node);
        } else {
          return Unexpected("an attribute name");
        }
      } else if (IsOp("[")) {
        absl::StatusOr<ExprPtr> subscript = ParseSubscript(std::move(expr));
        if (!subscript.ok()) return subscript;
        expr = *std::move(subscript);
      } else if (IsOp("(")) {
        absl::StatusOr<ExprPtr> call = ParseCall(std::move(expr), Expr::Kind::kCall, "");
        if (!call.ok()) return call;
        expr = *std::move(call);
      } else {
        return expr;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr target) {
    const Position p = Next().position;
    std::vector<ExprPtr> parts;
    bool slice = false;
    for (int part = 0; part < 3; ++part) {
      if (IsOp(":") || IsOp("]")) {
        parts.push_back(nullptr);
      } else {
        absl::StatusOr<ExprPtr> bound = ParseExpression();
        if (!bound.ok()) return bound;
        parts.push_back(*std::move(bound));
      }
      if (!SkipOp(":")) break;
      slice = true;
    }
    if (absl::Status s = ExpectOp("]"); !s.ok()) return s;
    auto node = NewExpr(slice ? Expr::Kind::kSlice : Expr::Kind::kItem, p);
    node->args.push_back(std::move(target));
    if (!slice && parts[0] == nullptr) return ErrorAt(p, "empty subscript '[]'");
    for (ExprPtr& part : parts) node->args.push_back(std::move(part));
    while (slice && node->args.size() < 4) node->args.push_back(nullptr);
    return node;
  }

  // `(args)` after a callee, a filter or a test; `node` becomes args[0].
  absl::StatusOr<ExprPtr> ParseCall(ExprPtr target, Expr::Kind kind, std::string name) {
    const Position p = Next().position;
    auto node = NewExpr(kind, p);
    node->name = std::move(name);
    node->args.push_back(std::move(target));
    while (!IsOp(")")) {
      if (IsOp("*") || IsOp("**")) return ErrorAt(Peek().position, "unsupported construct '*args'");
      if (Peek().kind == Kind::kName && IsOp("=", 1)) {
        std::string key = Next().text;
        Next();
        absl::StatusOr<ExprPtr> value = ParseExpression();
        if (!value.ok()) return value;
        node->keyword.emplace_back(std::move(key), *std::move(value));
      } else {
        if (!node->keyword.empty()) {
          return ErrorAt(Peek().position, "a positional argument after a keyword argument");
        }
        absl::StatusOr<ExprPtr> value = ParseExpression();
        if (!value.ok()) return value;
        node->args.push_back(*std::move(value));
      }
      if (!SkipOp(",")) break;
    }
    if (absl::Status s = ExpectOp(")"); !s.ok()) return s;
    return node;
  }

  // `| filter(args)` and `is [not] test args` after an operand (null: a {% filter %} block,
  // whose chain starts without a pipe).
  absl::StatusOr<ExprPtr> ParseFilterChain(ExprPtr expr, bool first_pipe = true) {
    bool need_pipe = first_pipe;
    while (true) {
      if (!need_pipe || IsOp("|")) {
        if (need_pipe) Next();
        need_pipe = true;
        const Position p = Peek().position;
        absl::StatusOr<std::string> name = ExpectName("a filter name");
        if (!name.ok()) return name.status();
        if (IsOp("(")) {
          absl::StatusOr<ExprPtr> call = ParseCall(std::move(expr), Expr::Kind::kFilter, *name);
          if (!call.ok()) return call;
          expr = *std::move(call);
        } else {
          auto node = NewExpr(Expr::Kind::kFilter, p);
          node->name = *name;
          node->args.push_back(std::move(expr));
          expr = std::move(node);
        }
      } else if (expr != nullptr && IsName("is")) {
        Next();
        const bool negated = SkipName("not");
        const Position p = Peek().position;
        absl::StatusOr<std::string> name = ExpectName("a test name");
        if (!name.ok()) return name.status();
        ExprPtr node;
        if (IsOp("(")) {
          absl::StatusOr<ExprPtr> call = ParseCall(std::move(expr), Expr::Kind::kTest, *name);
          if (!call.ok()) return call;
          node = *std::move(call);
        } else {
          node = NewExpr(Expr::Kind::kTest, p);
          node->name = *name;
          node->args.push_back(std::move(expr));
          const Token& t = Peek();
          const bool starts_operand =
              t.kind == Kind::kString || t.kind == Kind::kInt || t.kind == Kind::kFloat ||
              (t.kind == Kind::kName && t.text != "else" && t.text != "or" && t.text != "and") ||
              IsOp("[") || IsOp("{");
          if (starts_operand) {
            absl::StatusOr<ExprPtr> primary = ParsePrimary();
            if (!primary.ok()) return primary;
            absl::StatusOr<ExprPtr> argument = ParsePostfix(*std::move(primary));
            if (!argument.ok()) return argument;
            node->args.push_back(*std::move(argument));
          }
        }
        node->negated = negated;
        expr = std::move(node);
      } else if (expr != nullptr && IsOp("(")) {
        absl::StatusOr<ExprPtr> call = ParseCall(std::move(expr), Expr::Kind::kCall, "");
        if (!call.ok()) return call;
        expr = *std::move(call);
      } else {
        return expr;
      }
    }
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

absl::StatusOr<Body> Parse(absl::string_view source) {
  absl::StatusOr<std::vector<Token>> tokens =
      Tokenize(std::string_view(source.data(), source.size()));
  if (!tokens.ok()) return tokens.status();
  absl::StatusOr<Body> body = Parser(*std::move(tokens)).ParseTemplate();
  if (!body.ok()) return body;
  if (absl::Status s = CheckFilterAndTestNames(*body); !s.ok()) return s;
  return body;
}

}  // namespace tpserve::jinja
