// Jinja2's grammar, with its precedence: conditional expressions, or, and,
// not, comparisons, + -, ~, * / // %, **, unary - +, then filters and tests
// (binding tighter than any binary operator) after postfix . [] ().
#include <cstdlib>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "model/jinja/ast.h"

namespace attn::jinja {
namespace {

constexpr int kMaxNesting = 200;  // expressions and blocks; templates are data

ExprPtr MakeExpr(Expr::Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

#define ASSIGN_OR_RETURN_EXPR(lhs, call)        \
  auto lhs##_or = (call);                       \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  ExprPtr lhs = std::move(*lhs##_or)

class ExprParser {
 public:
  ExprParser(const std::vector<Token>& tokens, size_t pos, int line)
      : tokens_(tokens), pos_(pos), line_(line) {}

  size_t pos() const { return pos_; }
  bool AtEnd() const { return pos_ >= tokens_.size(); }
  int line() const { return AtEnd() ? line_ : tokens_[pos_].line; }
  bool IsOp(std::string_view op) const {
    return !AtEnd() && tokens_[pos_].kind == Token::Kind::kOperator && tokens_[pos_].text == op;
  }
  bool IsName(std::string_view name) const {
    return !AtEnd() && tokens_[pos_].kind == Token::Kind::kName && tokens_[pos_].text == name;
  }
  absl::Status Expect(const std::string& op) {
    if (!IsOp(op)) return Unexpected(absl::StrCat("expected '", op, "'"));
    ++pos_;
    return absl::OkStatus();
  }
  absl::Status Unexpected(const std::string& what) const {
    return LineError(line(), AtEnd() ? absl::StrCat(what, ", found the end of the tag")
                                     : absl::StrCat(what, ", found '", tokens_[pos_].text, "'"));
  }
  absl::StatusOr<std::string> Name() {
    if (AtEnd() || tokens_[pos_].kind != Token::Kind::kName) return Unexpected("expected a name");
    return tokens_[pos_++].text;
  }

  // expr (',' expr)*: a tuple (a list) when there is a comma.
  absl::StatusOr<ExprPtr> Tuple(bool with_condition) {
    int line = this->line();
    ASSIGN_OR_RETURN_EXPR(first, Expression(with_condition));
    if (!IsOp(",")) return first;
    auto list = MakeExpr(Expr::Kind::kList, line);
    list->tuple = true;
    list->args.push_back(std::move(first));
    while (IsOp(",")) {
      ++pos_;
      if (AtEnd() || IsOp(")")) break;
      ASSIGN_OR_RETURN_EXPR(item, Expression(with_condition));
      list->args.push_back(std::move(item));
    }
    return list;
  }

  absl::StatusOr<ExprPtr> Expression(bool with_condition = true) {
    if (++depth_ > kMaxNesting) return LineError(line(), "expression nested too deeply");
    auto result = ConditionExpr(with_condition);
    --depth_;
    return result;
  }

 private:
  absl::StatusOr<ExprPtr> ConditionExpr(bool with_condition) {
    ASSIGN_OR_RETURN_EXPR(expr, Or());
    while (with_condition && IsName("if")) {
      auto cond = MakeExpr(Expr::Kind::kCondition, line());
      ++pos_;
      ASSIGN_OR_RETURN_EXPR(test, Or());
      cond->args.push_back(std::move(expr));
      cond->args.push_back(std::move(test));
      if (IsName("else")) {
        ++pos_;
        ASSIGN_OR_RETURN_EXPR(otherwise, Expression());
        cond->args.push_back(std::move(otherwise));
      } else {
        cond->args.push_back(nullptr);
      }
      expr = std::move(cond);
    }
    return expr;
  }

  ExprPtr Binary(ExprPtr left, std::string op, ExprPtr right) {
    auto e = MakeExpr(Expr::Kind::kBinary, left->line);
    e->name = std::move(op);
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  // One precedence level of left-associative operators (names such as
  // "or" or symbols), whose operands are the next level's.
  using Level = absl::StatusOr<ExprPtr> (ExprParser::*)();
  absl::StatusOr<ExprPtr> LeftAssociative(Level next, std::initializer_list<const char*> ops) {
    ASSIGN_OR_RETURN_EXPR(left, (this->*next)());
    while (true) {
      const char* op = nullptr;
      for (const char* candidate : ops) {
        if (IsOp(candidate) || IsName(candidate)) op = candidate;
      }
      if (op == nullptr) return left;
      ++pos_;
      ASSIGN_OR_RETURN_EXPR(right, (this->*next)());
      left = Binary(std::move(left), op, std::move(right));
    }
  }

  absl::StatusOr<ExprPtr> Or() { return LeftAssociative(&ExprParser::And, {"or"}); }
  absl::StatusOr<ExprPtr> And() { return LeftAssociative(&ExprParser::Not, {"and"}); }

  absl::StatusOr<ExprPtr> Not() {
    if (!IsName("not")) return CompareExpr();
    auto e = MakeExpr(Expr::Kind::kUnary, line());
    e->name = "not";
    ++pos_;
    if (++depth_ > kMaxNesting) return LineError(line(), "expression nested too deeply");
    ASSIGN_OR_RETURN_EXPR(operand, Not());
    --depth_;
    e->args.push_back(std::move(operand));
    return e;
  }

  absl::StatusOr<ExprPtr> CompareExpr() {
    ASSIGN_OR_RETURN_EXPR(first, Math1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp(">") || IsOp("<=") || IsOp(">=")) {
        op = tokens_[pos_++].text;
      } else if (IsName("in")) {
        op = "in";
        ++pos_;
      } else if (IsName("not") && pos_ + 1 < tokens_.size() && tokens_[pos_ + 1].text == "in" &&
                 tokens_[pos_ + 1].kind == Token::Kind::kName) {
        op = "not in";
        pos_ += 2;
      } else {
        break;
      }
      if (cmp == nullptr) {
        cmp = MakeExpr(Expr::Kind::kCompare, first->line);
        cmp->args.push_back(std::move(first));
      }
      ASSIGN_OR_RETURN_EXPR(next, Math1());
      cmp->ops.push_back(op);
      cmp->args.push_back(std::move(next));
    }
    return cmp != nullptr ? std::move(cmp) : std::move(first);
  }

  absl::StatusOr<ExprPtr> Math1() { return LeftAssociative(&ExprParser::Concat, {"+", "-"}); }
  absl::StatusOr<ExprPtr> Concat() { return LeftAssociative(&ExprParser::Math2, {"~"}); }
  absl::StatusOr<ExprPtr> Math2() {
    return LeftAssociative(&ExprParser::Pow, {"*", "/", "//", "%"});
  }
  absl::StatusOr<ExprPtr> Pow() { return LeftAssociative(&ExprParser::Filtered, {"**"}); }
  absl::StatusOr<ExprPtr> Filtered() { return Unary(true); }

  absl::StatusOr<ExprPtr> Unary(bool with_filter) {
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      node = MakeExpr(Expr::Kind::kUnary, line());
      node->name = tokens_[pos_++].text;
      if (++depth_ > kMaxNesting) return LineError(line(), "expression nested too deeply");
      ASSIGN_OR_RETURN_EXPR(operand, Unary(false));
      --depth_;
      node->args.push_back(std::move(operand));
    } else {
      ASSIGN_OR_RETURN_EXPR(primary, Primary());
      node = std::move(primary);
    }
    ASSIGN_OR_RETURN_EXPR(post, Postfix(std::move(node)));
    if (!with_filter) return post;
    return FilterExpr(std::move(post));
  }

  absl::StatusOr<ExprPtr> Primary();
  absl::StatusOr<ExprPtr> Postfix(ExprPtr node);
  absl::StatusOr<ExprPtr> Subscript(ExprPtr node);
  absl::StatusOr<ExprPtr> FilterExpr(ExprPtr node);
  absl::Status CallArguments(Expr* call);

  const std::vector<Token>& tokens_;
  size_t pos_;
  int line_;
  int depth_ = 0;
};

absl::StatusOr<ExprPtr> ExprParser::Primary() {
  if (AtEnd()) return Unexpected("expected an expression");
  const Token& t = tokens_[pos_];
  auto literal = MakeExpr(Expr::Kind::kLiteral, t.line);
  switch (t.kind) {
    case Token::Kind::kString: {
      std::string text;
      while (!AtEnd() && tokens_[pos_].kind == Token::Kind::kString) text += tokens_[pos_++].text;
      literal->value = Value::String(std::move(text));
      return literal;
    }
    case Token::Kind::kInt: {
      errno = 0;
      long long v = std::strtoll(t.text.c_str(), nullptr, 10);
      if (errno == ERANGE) return LineError(t.line, absl::StrCat("integer ", t.text, " too large"));
      literal->value = Value::Int(v);
      ++pos_;
      return literal;
    }
    case Token::Kind::kFloat:
      literal->value = Value::Float(std::strtod(t.text.c_str(), nullptr));
      ++pos_;
      return literal;
    case Token::Kind::kName: {
      ++pos_;
      if (t.text == "true" || t.text == "True")
        literal->value = Value::Bool(true);
      else if (t.text == "false" || t.text == "False")
        literal->value = Value::Bool(false);
      else if (t.text == "none" || t.text == "None")
        literal->value = Value::None();
      else {
        auto name = MakeExpr(Expr::Kind::kName, t.line);
        name->name = t.text;
        return name;
      }
      return literal;
    }
    case Token::Kind::kOperator:
      break;
  }
  if (++depth_ > kMaxNesting) return LineError(t.line, "expression nested too deeply");
  struct Leave {
    int* d;
    ~Leave() { --*d; }
  } leave{&depth_};
  if (IsOp("(")) {
    ++pos_;
    if (IsOp(")")) {
      ++pos_;
      auto empty = MakeExpr(Expr::Kind::kList, t.line);
      empty->tuple = true;
      return empty;
    }
    ASSIGN_OR_RETURN_EXPR(inner, Tuple(true));
    if (absl::Status s = Expect(")"); !s.ok()) return s;
    return inner;
  }
  if (IsOp("[") || IsOp("{")) {
    bool is_dict = IsOp("{");
    auto e = MakeExpr(is_dict ? Expr::Kind::kDict : Expr::Kind::kList, t.line);
    ++pos_;
    const char* close = is_dict ? "}" : "]";
    while (!IsOp(close)) {
      ASSIGN_OR_RETURN_EXPR(item, Expression());
      e->args.push_back(std::move(item));
      if (is_dict) {
        if (absl::Status s = Expect(":"); !s.ok()) return s;
        ASSIGN_OR_RETURN_EXPR(value, Expression());
        e->args.push_back(std::move(value));
      }
      if (!IsOp(",")) break;
      ++pos_;
    }
    if (absl::Status s = Expect(close); !s.ok()) return s;
    return e;
  }
  return Unexpected("expected an expression");
}

absl::StatusOr<ExprPtr> ExprParser::Postfix(ExprPtr node) {
  while (true) {
    if (IsOp(".")) {
      ++pos_;
      if (AtEnd()) return Unexpected("expected an attribute");
      const Token& t = tokens_[pos_];
      if (t.kind == Token::Kind::kInt) {  // x.0 is x[0]
        auto item = MakeExpr(Expr::Kind::kItem, t.line);
        item->args.push_back(std::move(node));
        auto index = MakeExpr(Expr::Kind::kLiteral, t.line);
        index->value = Value::Int(std::strtoll(t.text.c_str(), nullptr, 10));
        item->args.push_back(std::move(index));
        node = std::move(item);
        ++pos_;
        continue;
      }
      auto attr = MakeExpr(Expr::Kind::kAttribute, t.line);
      auto name = Name();
      if (!name.ok()) return name.status();
      attr->name = *name;
      attr->args.push_back(std::move(node));
      node = std::move(attr);
    } else if (IsOp("[")) {
      ASSIGN_OR_RETURN_EXPR(sub, Subscript(std::move(node)));
      node = std::move(sub);
    } else if (IsOp("(")) {
      auto call = MakeExpr(Expr::Kind::kCall, node->line);
      call->args.push_back(std::move(node));
      if (absl::Status s = CallArguments(call.get()); !s.ok()) return s;
      node = std::move(call);
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> ExprParser::Subscript(ExprPtr node) {
  int line = this->line();
  ++pos_;  // [
  ExprPtr parts[3];
  int part = 0;
  bool slice = false;
  while (!IsOp("]")) {
    if (IsOp(":")) {
      slice = true;
      if (++part > 2) return Unexpected("expected ']'");
      ++pos_;
      continue;
    }
    if (parts[part] != nullptr) return Unexpected("expected ']'");
    ASSIGN_OR_RETURN_EXPR(e, Expression());
    parts[part] = std::move(e);
  }
  ++pos_;
  auto out = MakeExpr(slice ? Expr::Kind::kSlice : Expr::Kind::kItem, line);
  out->args.push_back(std::move(node));
  if (!slice && parts[0] == nullptr) return LineError(line, "expected a subscript");
  for (int i = 0; i < (slice ? 3 : 1); ++i) out->args.push_back(std::move(parts[i]));
  return out;
}

// ( positional..., name=value... ) appended to call->args / keywords.
absl::Status ExprParser::CallArguments(Expr* call) {
  if (absl::Status s = Expect("("); !s.ok()) return s;
  while (!IsOp(")")) {
    if (!AtEnd() && tokens_[pos_].kind == Token::Kind::kName && pos_ + 1 < tokens_.size() &&
        tokens_[pos_ + 1].kind == Token::Kind::kOperator && tokens_[pos_ + 1].text == "=") {
      std::string key = tokens_[pos_].text;
      pos_ += 2;
      auto value = Expression();
      if (!value.ok()) return value.status();
      call->keywords.emplace_back(key, std::move(*value));
    } else {
      if (!call->keywords.empty()) return Unexpected("positional argument after keyword argument");
      auto value = Expression();
      if (!value.ok()) return value.status();
      call->args.push_back(std::move(*value));
    }
    if (!IsOp(",")) break;
    ++pos_;
  }
  return Expect(")");
}

absl::StatusOr<ExprPtr> ExprParser::FilterExpr(ExprPtr node) {
  while (IsOp("|") || IsName("is")) {
    bool filter = IsOp("|");
    auto e = MakeExpr(filter ? Expr::Kind::kFilter : Expr::Kind::kTest, line());
    ++pos_;
    if (!filter && IsName("not")) {
      e->negated = true;
      ++pos_;
    }
    auto name = Name();
    if (!name.ok()) return name.status();
    e->name = *name;
    while (filter && IsOp(".")) {  // dotted filter names
      ++pos_;
      auto part = Name();
      if (!part.ok()) return part.status();
      e->name += "." + *part;
    }
    e->args.push_back(std::move(node));
    if (IsOp("(")) {
      if (absl::Status s = CallArguments(e.get()); !s.ok()) return s;
    } else if (!filter && !AtEnd() && !IsName("else") && !IsName("or") && !IsName("and") &&
               !IsName("if") &&
               (tokens_[pos_].kind != Token::Kind::kOperator || IsOp("[") || IsOp("{"))) {
      ASSIGN_OR_RETURN_EXPR(arg, Primary());  // `x is divisibleby 3`
      ASSIGN_OR_RETURN_EXPR(post, Postfix(std::move(arg)));
      e->args.push_back(std::move(post));
    }
    ASSIGN_OR_RETURN_EXPR(post, Postfix(std::move(e)));
    node = std::move(post);
  }
  return node;
}

class StatementParser {
 public:
  explicit StatementParser(std::vector<Segment> segments) : segments_(std::move(segments)) {}

  absl::StatusOr<Body> Run() {
    std::string end;
    auto body = ParseBody({}, &end);
    if (!body.ok()) return body.status();
    return std::move(*body);
  }

 private:
  // Statements up to a tag in `ends` (whose name goes to *end, its parser
  // left at the token after the name) or the end of the template.
  absl::StatusOr<Body> ParseBody(const std::vector<std::string>& ends, std::string* end);
  absl::StatusOr<std::unique_ptr<Node>> Statement(const Segment& seg, ExprParser& p,
                                                  const std::string& tag);
  absl::StatusOr<std::unique_ptr<Node>> If(ExprParser& p, int line);
  absl::StatusOr<std::unique_ptr<Node>> For(ExprParser& p, int line);
  absl::StatusOr<std::unique_ptr<Node>> Set(ExprParser& p, int line);
  absl::StatusOr<std::unique_ptr<Node>> Macro(ExprParser& p, int line);
  absl::Status EndOfTag(const ExprParser& p) const {
    return p.AtEnd() ? absl::OkStatus() : p.Unexpected("expected the end of the tag");
  }

  std::vector<Segment> segments_;
  size_t next_ = 0;
  int depth_ = 0;
  std::unique_ptr<ExprParser> current_;  // the parser of the tag that ended the last body
};

absl::StatusOr<Body> StatementParser::ParseBody(const std::vector<std::string>& ends,
                                                std::string* end) {
  if (++depth_ > kMaxNesting)
    return LineError(segments_.empty() ? 1 : segments_[0].line, "blocks nested too deeply");
  Body body;
  while (next_ < segments_.size()) {
    const Segment& seg = segments_[next_++];
    auto node = std::make_unique<Node>();
    node->line = seg.line;
    if (seg.kind == Segment::Kind::kText) {
      node->kind = Node::Kind::kText;
      node->text = seg.text;
      body.push_back(std::move(node));
      continue;
    }
    current_ = std::make_unique<ExprParser>(seg.tokens, 0, seg.line);
    ExprParser& p = *current_;
    if (seg.kind == Segment::Kind::kOutput) {
      node->kind = Node::Kind::kOutput;
      auto expr = p.Tuple(true);
      if (!expr.ok()) return expr.status();
      if (absl::Status s = EndOfTag(p); !s.ok()) return s;
      node->expr = std::move(*expr);
      body.push_back(std::move(node));
      continue;
    }
    auto tag = p.Name();
    if (!tag.ok()) return tag.status();
    for (const std::string& e : ends) {
      if (*tag == e) {
        *end = e;
        --depth_;
        return body;
      }
    }
    auto statement = Statement(seg, p, *tag);
    if (!statement.ok()) return statement.status();
    body.push_back(std::move(*statement));
  }
  if (!ends.empty()) {
    return LineError(segments_.empty() ? 1 : segments_.back().line,
                     absl::StrCat("missing {% ", ends.back(), " %}"));
  }
  --depth_;
  return body;
}

absl::StatusOr<std::unique_ptr<Node>> StatementParser::Statement(const Segment& seg, ExprParser& p,
                                                                 const std::string& tag) {
  if (tag == "if") return If(p, seg.line);
  if (tag == "for") return For(p, seg.line);
  if (tag == "set") return Set(p, seg.line);
  if (tag == "macro") return Macro(p, seg.line);
  auto node = std::make_unique<Node>();
  node->line = seg.line;
  if (tag == "break" || tag == "continue") {
    node->kind = tag == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
    if (absl::Status s = EndOfTag(p); !s.ok()) return s;
    return node;
  }
  if (tag == "generation") {  // Hugging Face's marker of assistant text
    node->kind = Node::Kind::kScope;
    std::string end;
    auto body = ParseBody({"endgeneration"}, &end);
    if (!body.ok()) return body.status();
    node->body = std::move(*body);
    return node;
  }
  return LineError(seg.line, absl::StrCat("unknown or unsupported tag '", tag, "'"));
}

absl::StatusOr<std::unique_ptr<Node>> StatementParser::If(ExprParser& p, int line) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kIf;
  node->line = line;
  ExprParser* parser = &p;
  while (true) {
    auto cond = parser->Tuple(true);
    if (!cond.ok()) return cond.status();
    if (absl::Status s = EndOfTag(*parser); !s.ok()) return s;
    std::string end;
    auto body = ParseBody({"elif", "else", "endif"}, &end);
    if (!body.ok()) return body.status();
    node->branches.emplace_back(std::move(*cond), std::move(*body));
    parser = current_.get();
    if (end == "endif") break;
    if (end == "else") {
      if (absl::Status s = EndOfTag(*parser); !s.ok()) return s;
      auto otherwise = ParseBody({"endif"}, &end);
      if (!otherwise.ok()) return otherwise.status();
      node->else_body = std::move(*otherwise);
      parser = current_.get();
      break;
    }
  }
  if (absl::Status s = EndOfTag(*parser); !s.ok()) return s;
  return node;
}

absl::StatusOr<std::unique_ptr<Node>> StatementParser::For(ExprParser& p, int line) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kFor;
  node->line = line;
  while (true) {
    bool paren = p.IsOp("(");
    if (paren) (void)p.Expect("(");
    auto name = p.Name();
    if (!name.ok()) return name.status();
    node->targets.push_back(*name);
    while (paren && p.IsOp(",")) {
      (void)p.Expect(",");
      auto more = p.Name();
      if (!more.ok()) return more.status();
      node->targets.push_back(*more);
    }
    if (paren) {
      if (absl::Status s = p.Expect(")"); !s.ok()) return s;
    }
    if (!p.IsOp(",")) break;
    (void)p.Expect(",");
  }
  if (!p.IsName("in")) return p.Unexpected("expected 'in'");
  (void)p.Name();
  auto iterable = p.Tuple(false);
  if (!iterable.ok()) return iterable.status();
  node->expr = std::move(*iterable);
  if (p.IsName("if")) {
    (void)p.Name();
    auto cond = p.Expression(false);
    if (!cond.ok()) return cond.status();
    node->condition = std::move(*cond);
  }
  if (p.IsName("recursive")) return p.Unexpected("recursive loops are not supported");
  if (absl::Status s = EndOfTag(p); !s.ok()) return s;
  std::string end;
  auto body = ParseBody({"else", "endfor"}, &end);
  if (!body.ok()) return body.status();
  node->body = std::move(*body);
  if (end == "else") {
    if (absl::Status s = EndOfTag(*current_); !s.ok()) return s;
    auto otherwise = ParseBody({"endfor"}, &end);
    if (!otherwise.ok()) return otherwise.status();
    node->else_body = std::move(*otherwise);
  }
  if (absl::Status s = EndOfTag(*current_); !s.ok()) return s;
  return node;
}

absl::StatusOr<std::unique_ptr<Node>> StatementParser::Set(ExprParser& p, int line) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kSet;
  node->line = line;
  auto name = p.Name();
  if (!name.ok()) return name.status();
  node->targets.push_back(*name);
  if (p.IsOp(".")) {
    (void)p.Expect(".");
    auto attribute = p.Name();
    if (!attribute.ok()) return attribute.status();
    node->attribute = *attribute;
  }
  while (node->attribute.empty() && p.IsOp(",")) {
    (void)p.Expect(",");
    auto more = p.Name();
    if (!more.ok()) return more.status();
    node->targets.push_back(*more);
  }
  if (p.AtEnd() && node->attribute.empty() && node->targets.size() == 1) {
    node->kind = Node::Kind::kSetBlock;
    std::string end;
    auto body = ParseBody({"endset"}, &end);
    if (!body.ok()) return body.status();
    node->body = std::move(*body);
    if (absl::Status s = EndOfTag(*current_); !s.ok()) return s;
    return node;
  }
  if (absl::Status s = p.Expect("="); !s.ok()) return s;
  auto value = p.Tuple(true);
  if (!value.ok()) return value.status();
  node->expr = std::move(*value);
  if (absl::Status s = EndOfTag(p); !s.ok()) return s;
  return node;
}

absl::StatusOr<std::unique_ptr<Node>> StatementParser::Macro(ExprParser& p, int line) {
  auto node = std::make_unique<Node>();
  node->kind = Node::Kind::kMacro;
  node->line = line;
  auto name = p.Name();
  if (!name.ok()) return name.status();
  node->targets.push_back(*name);
  if (absl::Status s = p.Expect("("); !s.ok()) return s;
  while (!p.IsOp(")")) {
    auto param = p.Name();
    if (!param.ok()) return param.status();
    ExprPtr fallback;
    if (p.IsOp("=")) {
      (void)p.Expect("=");
      auto value = p.Expression();
      if (!value.ok()) return value.status();
      fallback = std::move(*value);
    }
    node->params.emplace_back(*param, std::move(fallback));
    if (!p.IsOp(",")) break;
    (void)p.Expect(",");
  }
  if (absl::Status s = p.Expect(")"); !s.ok()) return s;
  if (absl::Status s = EndOfTag(p); !s.ok()) return s;
  std::string end;
  auto body = ParseBody({"endmacro"}, &end);
  if (!body.ok()) return body.status();
  node->body = std::move(*body);
  return node;
}

}  // namespace

absl::StatusOr<Body> Parse(std::vector<Segment> segments) {
  return StatementParser(std::move(segments)).Run();
}

}  // namespace attn::jinja
