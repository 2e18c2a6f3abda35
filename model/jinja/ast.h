// The parsed form of a template: expressions and statements. Internal to
// model/jinja (template.h is the interface).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/jinja/lexer.h"
#include "model/jinja/value.h"

namespace attn::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // value
    kName,       // name
    kList,       // args: the items (a tuple when `tuple`)
    kDict,       // args: key, value, key, value ...
    kAttribute,  // args[0].name
    kItem,       // args[0][args[1]]
    kSlice,      // args[0][args[1]:args[2]:args[3]], absent parts null
    kCall,       // args[0](args[1..], keywords)
    kFilter,     // args[0] | name(args[1..], keywords)
    kTest,       // args[0] is [not] name(args[1..])
    kUnary,      // name ("-", "+", "not") args[0]
    kBinary,     // args[0] name args[1]: + - * / // % ** ~ and or
    kCompare,    // args[0] ops[0] args[1] ops[1] args[2] ...
    kCondition,  // args[0] if args[1] else args[2] (null: undefined)
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;
  bool negated = false;  // kTest: `is not`
  bool tuple = false;    // kList: written (a, b)
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  std::vector<std::string> ops;
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches: (condition, body) ...; else_body
    kFor,       // for targets in expr [if condition]: body; else_body
    kSet,       // set targets = expr, or set targets[0].attribute = expr
    kSetBlock,  // set targets[0]: body
    kMacro,     // macro name(params): body
    kBreak,
    kContinue,
    kScope,  // a body with no effect of its own ({% generation %})
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::string> targets;
  std::string attribute;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters, defaults or null
};

// The statements of a lexed template; errors name the line.
absl::StatusOr<Body> Parse(std::vector<Segment> segments);

}  // namespace attn::jinja
