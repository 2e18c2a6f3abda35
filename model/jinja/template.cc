#include "model/jinja/template.h"

#include <cmath>
#include <ctime>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/jinja/ast.h"
#include "model/jinja/builtins.h"
#include "nlohmann/json.hpp"

namespace attn::jinja {

struct Template::Program {
  Body body;
};

namespace {

// Variables of one scope. Jinja2 gives each loop iteration and each macro
// call a scope of its own: what they set does not outlive them.
class Frame {
 public:
  explicit Frame(const Frame* parent) : parent_(parent) {}
  const Value* Lookup(const std::string& name) const {
    for (const Frame* f = this; f != nullptr; f = f->parent_) {
      for (auto it = f->vars_.rbegin(); it != f->vars_.rend(); ++it) {
        if (it->first == name) return &it->second;
      }
    }
    return nullptr;
  }
  void Set(const std::string& name, Value value) {
    for (auto& [k, v] : vars_) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    vars_.emplace_back(name, std::move(value));
  }

 private:
  const Frame* parent_;
  std::vector<std::pair<std::string, Value>> vars_;
};

enum class Flow { kNormal, kBreak, kContinue };

absl::Status AtLine(int line, const absl::Status& s) {
  if (s.ok() || absl::StartsWith(s.message(), "line ")) return s;
  return absl::Status(s.code(), absl::StrCat("line ", line, ": ", s.message()));
}

#define RETURN_IF_ERROR_AT(line, expr)       \
  do {                                       \
    absl::Status _s = (expr);                \
    if (!_s.ok()) return AtLine((line), _s); \
  } while (0)

#define ASSIGN_OR_RETURN_AT(line, lhs, expr)                    \
  auto lhs##_or = (expr);                                       \
  if (!lhs##_or.ok()) return AtLine((line), lhs##_or.status()); \
  lhs = std::move(*lhs##_or)

class Renderer {
 public:
  explicit Renderer(const RenderOptions& options) : options_(options) {
    ctx_.charge = [this](int64_t n) { return Charge(n); };
    ctx_.strftime_now = [this](const std::string& format) { return Now(format); };
  }

  absl::StatusOr<std::string> Run(const Body& body, Frame& root) {
    root_ = &root;
    auto flow = Exec(body, root, &out_);
    if (!flow.ok()) return flow.status();
    return std::move(out_);
  }

 private:
  absl::Status Charge(int64_t n) {
    steps_ += n;
    if (steps_ > options_.limits.max_steps) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the template did more than ", options_.limits.max_steps, " steps of work"));
    }
    return absl::OkStatus();
  }

  absl::Status Emit(std::string* out, std::string_view text) {
    out->append(text);
    if (out->size() > options_.limits.max_output_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat("the template wrote more than ",
                                                       options_.limits.max_output_bytes, " bytes"));
    }
    return absl::OkStatus();
  }

  std::string Now(const std::string& format) const {
    if (options_.strftime_now) return options_.strftime_now(format);
    std::time_t t = std::time(nullptr);
    std::tm local{};
    localtime_r(&t, &local);
    char buf[256];
    size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &local);
    return std::string(buf, n);
  }

  absl::StatusOr<Flow> Exec(const Body& body, Frame& frame, std::string* out);
  absl::StatusOr<Flow> ExecNode(const Node& node, Frame& frame, std::string* out);
  absl::StatusOr<Flow> ExecFor(const Node& node, Frame& frame, std::string* out);
  absl::Status ExecSet(const Node& node, Frame& frame, std::string* out);
  Value DefineMacro(const Node& node);
  absl::StatusOr<Value> CallMacro(const Node& node, CallArgs& args);

  absl::StatusOr<Value> Eval(const Expr& e, const Frame& frame);
  absl::StatusOr<Value> EvalName(const Expr& e, const Frame& frame);
  absl::StatusOr<Value> EvalCall(const Expr& e, const Frame& frame);
  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first, const Frame& frame);
  absl::StatusOr<Value> EvalBinary(const Expr& e, const Frame& frame);
  absl::StatusOr<Value> EvalCompare(const Expr& e, const Frame& frame);
  absl::StatusOr<Value> EvalUnary(const Expr& e, const Frame& frame);
  absl::Status ChargeGrowth(const Value& v);

  const RenderOptions& options_;
  BuiltinContext ctx_;
  std::string out_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  const Frame* root_ = nullptr;
};

absl::StatusOr<Flow> Renderer::Exec(const Body& body, Frame& frame, std::string* out) {
  for (const auto& node : body) {
    auto flow = ExecNode(*node, frame, out);
    if (!flow.ok() || *flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

absl::StatusOr<Flow> Renderer::ExecNode(const Node& node, Frame& frame, std::string* out) {
  RETURN_IF_ERROR_AT(node.line, Charge(1));
  switch (node.kind) {
    case Node::Kind::kText:
      RETURN_IF_ERROR_AT(node.line, Emit(out, node.text));
      return Flow::kNormal;
    case Node::Kind::kOutput: {
      Value v;
      ASSIGN_OR_RETURN_AT(node.line, v, Eval(*node.expr, frame));
      RETURN_IF_ERROR_AT(node.line, Emit(out, v.Str()));
      return Flow::kNormal;
    }
    case Node::Kind::kIf:
      for (const auto& [cond, body] : node.branches) {
        Value v;
        ASSIGN_OR_RETURN_AT(cond->line, v, Eval(*cond, frame));
        if (v.Truthy()) return Exec(body, frame, out);
      }
      return Exec(node.else_body, frame, out);
    case Node::Kind::kFor:
      return ExecFor(node, frame, out);
    case Node::Kind::kSet:
    case Node::Kind::kSetBlock:
      RETURN_IF_ERROR_AT(node.line, ExecSet(node, frame, out));
      return Flow::kNormal;
    case Node::Kind::kMacro:
      frame.Set(node.targets[0], DefineMacro(node));
      return Flow::kNormal;
    case Node::Kind::kBreak:
      return Flow::kBreak;
    case Node::Kind::kContinue:
      return Flow::kContinue;
    case Node::Kind::kScope: {  // Hugging Face runs it as a call block: a scope of its own
      Frame scope(&frame);
      return Exec(node.body, scope, out);
    }
  }
  return Flow::kNormal;
}

Value MakeLoop(const std::vector<Value>& items, size_t i) {
  int64_t n = static_cast<int64_t>(items.size());
  int64_t index = static_cast<int64_t>(i);
  Dict loop = {
      {"index", Value::Int(index + 1)},
      {"index0", Value::Int(index)},
      {"revindex", Value::Int(n - index)},
      {"revindex0", Value::Int(n - index - 1)},
      {"first", Value::Bool(i == 0)},
      {"last", Value::Bool(index == n - 1)},
      {"length", Value::Int(n)},
      {"depth", Value::Int(1)},
      {"depth0", Value::Int(0)},
      {"previtem", i > 0 ? items[i - 1] : Value()},
      {"nextitem", index + 1 < n ? items[i + 1] : Value()},
  };
  loop.emplace_back("cycle", Value::MakeFunction([index](CallArgs& args) -> absl::StatusOr<Value> {
                      if (args.positional.empty()) {
                        return absl::InvalidArgumentError("loop.cycle() needs an argument");
                      }
                      return args.positional[index % args.positional.size()];
                    }));
  return Value::MakeDict(std::move(loop));
}

absl::StatusOr<std::vector<Value>> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:  // Jinja2 raises for None; templates guard it
      if (v.is_none()) return absl::InvalidArgumentError("'NoneType' object is not iterable");
      return std::vector<Value>();
    case Value::Kind::kList:
      return v.list();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, _] : v.dict()) keys.push_back(Value::String(k));
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      const std::string& s = v.str();
      for (size_t i = 0; i < s.size();) {
        size_t n = 1;
        while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xC0) == 0x80) ++n;
        chars.push_back(Value::String(s.substr(i, n)));
        i += n;
      }
      return chars;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("'", v.TypeName(), "' object is not iterable"));
  }
}

absl::Status Unpack(const std::vector<std::string>& targets, const Value& item, Frame& frame) {
  if (targets.size() == 1) {
    frame.Set(targets[0], item);
    return absl::OkStatus();
  }
  auto parts = Iterate(item);
  if (!parts.ok()) return parts.status();
  if (parts->size() != targets.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot unpack ", parts->size(), " values into ", targets.size(), " names"));
  }
  for (size_t i = 0; i < targets.size(); ++i) frame.Set(targets[i], (*parts)[i]);
  return absl::OkStatus();
}

absl::StatusOr<Flow> Renderer::ExecFor(const Node& node, Frame& frame, std::string* out) {
  Value iterable;
  ASSIGN_OR_RETURN_AT(node.line, iterable, Eval(*node.expr, frame));
  std::vector<Value> items;
  ASSIGN_OR_RETURN_AT(node.line, items, Iterate(iterable));
  if (node.condition != nullptr) {  // `for x in xs if cond`: loop counts what passes
    std::vector<Value> kept;
    for (const Value& item : items) {
      Frame scope(&frame);
      RETURN_IF_ERROR_AT(node.line, Unpack(node.targets, item, scope));
      Value pass;
      ASSIGN_OR_RETURN_AT(node.line, pass, Eval(*node.condition, scope));
      if (pass.Truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    RETURN_IF_ERROR_AT(node.line, Charge(1));
    Frame scope(&frame);
    RETURN_IF_ERROR_AT(node.line, Unpack(node.targets, items[i], scope));
    scope.Set("loop", MakeLoop(items, i));
    auto flow = Exec(node.body, scope, out);
    if (!flow.ok()) return flow;
    if (*flow == Flow::kBreak) break;
  }
  if (items.empty()) return Exec(node.else_body, frame, out);
  return Flow::kNormal;
}

absl::Status Renderer::ExecSet(const Node& node, Frame& frame, std::string* out) {
  (void)out;
  Value value;
  if (node.kind == Node::Kind::kSetBlock) {
    std::string captured;
    auto flow = Exec(node.body, frame, &captured);
    if (!flow.ok()) return flow.status();
    value = Value::String(std::move(captured));
  } else {
    auto v = Eval(*node.expr, frame);
    if (!v.ok()) return v.status();
    value = std::move(*v);
  }
  if (node.attribute.empty()) return Unpack(node.targets, value, frame);
  const Value* target = frame.Lookup(node.targets[0]);
  if (target == nullptr || !target->is_namespace()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot assign attribute on '", node.targets[0], "': not a namespace"));
  }
  target->SetAttribute(node.attribute, std::move(value));
  return absl::OkStatus();
}

Value Renderer::DefineMacro(const Node& node) {
  return Value::MakeFunction([this, &node](CallArgs& args) { return CallMacro(node, args); });
}

absl::StatusOr<Value> Renderer::CallMacro(const Node& node, CallArgs& args) {
  if (call_depth_ >= options_.limits.max_call_depth) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "macro '", node.targets[0], "' nested deeper than ", options_.limits.max_call_depth));
  }
  Frame scope(root_);
  for (size_t i = 0; i < node.params.size(); ++i) {
    Value v = args.Take(i, node.params[i].first);
    if (v.is_undefined() && node.params[i].second != nullptr) {
      auto fallback = Eval(*node.params[i].second, scope);
      if (!fallback.ok()) return fallback.status();
      v = std::move(*fallback);
    }
    scope.Set(node.params[i].first, std::move(v));
  }
  if (absl::Status s = args.Unused(node.targets[0]); !s.ok()) return s;
  ++call_depth_;
  std::string text;
  auto flow = Exec(node.body, scope, &text);
  --call_depth_;
  if (!flow.ok()) return flow.status();
  return Value::String(std::move(text));
}

absl::Status UndefinedError(const Expr& e) {
  if (e.kind == Expr::Kind::kName || e.kind == Expr::Kind::kAttribute) {
    return absl::InvalidArgumentError(absl::StrCat("'", e.name, "' is undefined"));
  }
  return absl::InvalidArgumentError("a value is undefined");
}

absl::StatusOr<Value> Renderer::Eval(const Expr& e, const Frame& frame) {
  if (absl::Status s = Charge(1); !s.ok()) return s;
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.value;
    case Expr::Kind::kName:
      return EvalName(e, frame);
    case Expr::Kind::kList:
    case Expr::Kind::kDict: {
      List items;
      for (const auto& arg : e.args) {
        auto v = Eval(*arg, frame);
        if (!v.ok()) return v;
        items.push_back(std::move(*v));
      }
      if (e.kind == Expr::Kind::kList) return Value::MakeList(std::move(items), e.tuple);
      Dict entries;
      for (size_t i = 0; i + 1 < items.size(); i += 2) {
        if (!items[i].is_string()) return absl::InvalidArgumentError("dict keys must be strings");
        entries.emplace_back(items[i].str(), std::move(items[i + 1]));
      }
      return Value::MakeDict(std::move(entries));
    }
    case Expr::Kind::kAttribute:
    case Expr::Kind::kItem: {
      auto object = Eval(*e.args[0], frame);
      if (!object.ok()) return object;
      if (object->is_undefined()) return UndefinedError(*e.args[0]);
      if (e.kind == Expr::Kind::kAttribute) {
        const Value* found = object->Find(e.name);
        return found != nullptr ? *found : Value();
      }
      auto key = Eval(*e.args[1], frame);
      if (!key.ok()) return key;
      return Item(*object, *key);
    }
    case Expr::Kind::kSlice: {
      Value parts[4];
      for (int i = 0; i < 4; ++i) {
        if (e.args[i] == nullptr) continue;
        auto v = Eval(*e.args[i], frame);
        if (!v.ok()) return v;
        parts[i] = std::move(*v);
      }
      if (parts[0].is_undefined()) return UndefinedError(*e.args[0]);
      return Slice(parts[0], parts[1], parts[2], parts[3]);
    }
    case Expr::Kind::kCall:
      return EvalCall(e, frame);
    case Expr::Kind::kFilter:
    case Expr::Kind::kTest: {
      auto operand = Eval(*e.args[0], frame);
      if (!operand.ok()) return operand;
      auto args = EvalArgs(e, 1, frame);
      if (!args.ok()) return args.status();
      if (e.kind == Expr::Kind::kFilter) {
        auto v = ApplyFilter(ctx_, e.name, *operand, *args);
        if (absl::IsNotFound(v.status())) {
          return absl::InvalidArgumentError(absl::StrCat("no filter named '", e.name, "'"));
        }
        if (v.ok()) {
          if (absl::Status s = ChargeGrowth(*v); !s.ok()) return s;
        }
        return v;
      }
      auto pass = ApplyTest(ctx_, e.name, *operand, *args);
      if (absl::IsNotFound(pass.status())) {
        return absl::InvalidArgumentError(absl::StrCat("no test named '", e.name, "'"));
      }
      if (!pass.ok()) return pass.status();
      return Value::Bool(*pass != e.negated);
    }
    case Expr::Kind::kUnary:
      return EvalUnary(e, frame);
    case Expr::Kind::kBinary:
      return EvalBinary(e, frame);
    case Expr::Kind::kCompare:
      return EvalCompare(e, frame);
    case Expr::Kind::kCondition: {
      auto cond = Eval(*e.args[1], frame);
      if (!cond.ok()) return cond;
      if (cond->Truthy()) return Eval(*e.args[0], frame);
      return e.args[2] != nullptr ? Eval(*e.args[2], frame) : Value();
    }
  }
  return Value();
}

absl::StatusOr<Value> Renderer::EvalName(const Expr& e, const Frame& frame) {
  if (const Value* v = frame.Lookup(e.name)) return *v;
  if (IsGlobal(e.name)) {
    std::string name = e.name;
    return Value::MakeFunction(
        [this, name](CallArgs& args) { return CallGlobal(ctx_, name, args); });
  }
  return Value();
}

absl::StatusOr<CallArgs> Renderer::EvalArgs(const Expr& e, size_t first, const Frame& frame) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i) {
    auto v = Eval(*e.args[i], frame);
    if (!v.ok()) return v.status();
    args.positional.push_back(std::move(*v));
  }
  for (const auto& [name, expr] : e.keywords) {
    auto v = Eval(*expr, frame);
    if (!v.ok()) return v.status();
    args.keyword.emplace_back(name, std::move(*v));
  }
  return args;
}

absl::StatusOr<Value> Renderer::EvalCall(const Expr& e, const Frame& frame) {
  const Expr& callee = *e.args[0];
  auto args = EvalArgs(e, 1, frame);
  if (!args.ok()) return args.status();
  if (callee.kind == Expr::Kind::kAttribute) {  // a method, unless a dict holds a function
    auto object = Eval(*callee.args[0], frame);
    if (!object.ok()) return object;
    if (object->is_undefined()) return UndefinedError(*callee.args[0]);
    const Value* member = object->Find(callee.name);
    if (member == nullptr || member->kind() != Value::Kind::kFunction) {
      auto v = CallMethod(ctx_, *object, callee.name, *args);
      if (absl::IsNotFound(v.status())) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", object->TypeName(), "' object has no method '", callee.name, "'"));
      }
      return v;
    }
    return member->function()(*args);
  }
  auto fn = Eval(callee, frame);
  if (!fn.ok()) return fn;
  if (fn->is_undefined()) return UndefinedError(callee);
  if (fn->kind() != Value::Kind::kFunction) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", fn->TypeName(), "' object is not callable"));
  }
  return fn->function()(*args);
}

absl::StatusOr<Value> Renderer::EvalUnary(const Expr& e, const Frame& frame) {
  auto v = Eval(*e.args[0], frame);
  if (!v.ok()) return v;
  if (e.name == "not") return Value::Bool(!v->Truthy());
  if (v->is_undefined()) return UndefinedError(*e.args[0]);
  if (v->kind() == Value::Kind::kInt)
    return Value::Int(e.name == "-" ? -v->int_value() : v->int_value());
  if (v->kind() == Value::Kind::kFloat)
    return Value::Float(e.name == "-" ? -v->number() : v->number());
  if (v->kind() == Value::Kind::kBool) {
    int64_t i = v->bool_value() ? 1 : 0;
    return Value::Int(e.name == "-" ? -i : i);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("bad operand type for unary ", e.name, ": '", v->TypeName(), "'"));
}

absl::StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b);

absl::StatusOr<Value> Renderer::EvalBinary(const Expr& e, const Frame& frame) {
  auto a = Eval(*e.args[0], frame);
  if (!a.ok()) return a;
  if (e.name == "and") return a->Truthy() ? Eval(*e.args[1], frame) : a;
  if (e.name == "or") return a->Truthy() ? a : Eval(*e.args[1], frame);
  auto b = Eval(*e.args[1], frame);
  if (!b.ok()) return b;
  absl::StatusOr<Value> v;
  if (e.name == "~") {
    v = Value::String(a->Str() + b->Str());
  } else if (a->is_undefined()) {
    return UndefinedError(*e.args[0]);
  } else if (b->is_undefined()) {
    return UndefinedError(*e.args[1]);
  } else {
    v = Arithmetic(e.name, *a, *b);
  }
  if (v.ok()) {
    if (absl::Status s = ChargeGrowth(*v); !s.ok()) return s;
  }
  return v;
}

// Strings and lists that templates build count against the limits too: a
// template doubling a string or a list in a loop stops at the output limit,
// not at the end of memory.
absl::Status Renderer::ChargeGrowth(const Value& v) {
  if (v.is_string()) {
    if (v.str().size() > options_.limits.max_output_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("a string grew past ", options_.limits.max_output_bytes, " bytes"));
    }
    return Charge(static_cast<int64_t>(v.str().size() / 64));
  }
  if (v.is_list()) return Charge(static_cast<int64_t>(v.list().size()));
  return absl::OkStatus();
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'in <string>' requires string as left operand, not ", item.TypeName()));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.list()) {
        if (Equal(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return item.is_string() && container.Find(item.str()) != nullptr;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("argument of type '", container.TypeName(), "' is not iterable"));
  }
}

absl::StatusOr<Value> Renderer::EvalCompare(const Expr& e, const Frame& frame) {
  auto left = Eval(*e.args[0], frame);
  if (!left.ok()) return left;
  Value a = std::move(*left);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    auto right = Eval(*e.args[i + 1], frame);
    if (!right.ok()) return right;
    const std::string& op = e.ops[i];
    bool pass;
    if (op == "==" || op == "!=") {
      pass = Equal(a, *right) == (op == "==");
    } else if (op == "in" || op == "not in") {
      auto found = Contains(*right, a);
      if (!found.ok()) return found.status();
      pass = *found == (op == "in");
    } else {
      if (a.is_undefined()) return UndefinedError(*e.args[i]);
      if (right->is_undefined()) return UndefinedError(*e.args[i + 1]);
      auto c = Compare(a, *right);
      if (!c.ok()) return c.status();
      pass = op == "<" ? *c < 0 : op == "<=" ? *c <= 0 : op == ">" ? *c > 0 : *c >= 0;
    }
    if (!pass) return Value::Bool(false);
    a = std::move(*right);
  }
  return Value::Bool(true);
}

absl::StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b) {
  auto type_error = [&] {
    return absl::InvalidArgumentError(absl::StrCat("unsupported operand type(s) for ", op, ": '",
                                                   a.TypeName(), "' and '", b.TypeName(), "'"));
  };
  auto numeric = [](const Value& v) { return v.is_number() || v.kind() == Value::Kind::kBool; };
  if (op == "+" && a.is_string() && b.is_string()) return Value::String(a.str() + b.str());
  if (op == "+" && a.is_list() && b.is_list()) {
    List joined = a.list();
    joined.insert(joined.end(), b.list().begin(), b.list().end());
    return Value::MakeList(std::move(joined));
  }
  if (op == "*" && a.kind() == Value::Kind::kInt && (b.is_string() || b.is_list())) {
    return Arithmetic(op, b, a);
  }
  if (op == "*" && (a.is_string() || a.is_list()) && b.kind() == Value::Kind::kInt) {
    int64_t n = std::max<int64_t>(0, b.int_value());
    if (n > (1 << 20)) return absl::ResourceExhaustedError("repetition too large");
    if (a.is_string()) {
      std::string out;
      for (int64_t i = 0; i < n && out.size() <= (64u << 20); ++i) out += a.str();
      return Value::String(std::move(out));
    }
    List out;
    for (int64_t i = 0; i < n && out.size() <= (1u << 20); ++i) {
      out.insert(out.end(), a.list().begin(), a.list().end());
    }
    return Value::MakeList(std::move(out));
  }
  if (!numeric(a) || !numeric(b)) return type_error();
  auto as_int = [](const Value& v) {
    return v.kind() == Value::Kind::kBool ? (v.bool_value() ? 1 : 0) : v.int_value();
  };
  bool ints = a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat;
  double x = a.kind() == Value::Kind::kBool ? as_int(a) : a.number();
  double y = b.kind() == Value::Kind::kBool ? as_int(b) : b.number();
  if (op == "+") return ints ? Value::Int(as_int(a) + as_int(b)) : Value::Float(x + y);
  if (op == "-") return ints ? Value::Int(as_int(a) - as_int(b)) : Value::Float(x - y);
  if (op == "*") return ints ? Value::Int(as_int(a) * as_int(b)) : Value::Float(x * y);
  if (op == "**") {
    if (ints && as_int(b) >= 0) return Value::Int(static_cast<int64_t>(std::pow(x, y)));
    return Value::Float(std::pow(x, y));
  }
  if (y == 0) return absl::InvalidArgumentError("division by zero");
  if (op == "/") return Value::Float(x / y);
  if (op == "//") {
    if (!ints) return Value::Float(std::floor(x / y));
    int64_t q = as_int(a) / as_int(b);
    if ((as_int(a) % as_int(b) != 0) && ((as_int(a) < 0) != (as_int(b) < 0))) --q;
    return Value::Int(q);
  }
  if (op == "%") {
    if (!ints) return Value::Float(x - y * std::floor(x / y));
    int64_t r = as_int(a) % as_int(b);
    if (r != 0 && ((r < 0) != (as_int(b) < 0))) r += as_int(b);
    return Value::Int(r);
  }
  return type_error();
}

}  // namespace

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  auto segments = Lex(source);
  if (!segments.ok()) return segments.status();
  auto body = jinja::Parse(std::move(*segments));
  if (!body.ok()) return body.status();
  auto program = std::make_shared<Program>();
  program->body = std::move(*body);
  return Template(std::move(program));
}

absl::StatusOr<std::string> Template::Render(const nlohmann::ordered_json& variables,
                                             const RenderOptions& options) const {
  if (!variables.is_object()) {
    return absl::InvalidArgumentError("template variables must be a JSON object");
  }
  Frame root(nullptr);
  for (const auto& [name, value] : variables.items()) root.Set(name, Value::FromJson(value));
  Renderer renderer(options);
  return renderer.Run(program_->body, root);
}

}  // namespace attn::jinja
