// Jinja2's filters and tests, the Python methods of str, dict and list that
// chat templates call, and the globals Hugging Face adds (range, namespace,
// dict, raise_exception, strftime_now). Internal to model/jinja.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/jinja/value.h"

namespace attn::jinja {

// What a built-in needs of the render it runs in.
struct BuiltinContext {
  std::function<absl::Status(int64_t)> charge;  // counts work against the render's limit
  std::function<std::string(const std::string&)> strftime_now;
};

// Each returns NotFound when there is no such built-in, so the caller can
// name it; other errors are the built-in's own (a wrong argument).
absl::StatusOr<Value> ApplyFilter(BuiltinContext& ctx, const std::string& name,
                                  const Value& operand, CallArgs& args);
absl::StatusOr<bool> ApplyTest(BuiltinContext& ctx, const std::string& name, const Value& operand,
                               CallArgs& args);
absl::StatusOr<Value> CallMethod(BuiltinContext& ctx, const Value& object, const std::string& name,
                                 CallArgs& args);
absl::StatusOr<Value> CallGlobal(BuiltinContext& ctx, const std::string& name, CallArgs& args);
bool IsGlobal(const std::string& name);

// Python's len() in code points for strings; -1 where len() fails.
int64_t Length(const Value& v);
// Python's indexing and slicing of str (by code point) and list; undefined
// out of range, as Jinja2's getitem is.
Value Item(const Value& object, const Value& key);
absl::StatusOr<Value> Slice(const Value& object, const Value& start, const Value& stop,
                            const Value& step);

// Shared by the filters (builtins.cc) and the methods (methods.cc).
absl::Status ArgError(const std::string& callee, const std::string& what);
int64_t IntArg(const Value& v, int64_t fallback);  // an int, bool or float's value
Value StringList(const std::vector<std::string>& parts);
// The items a filter iterates: a list's, a dict's keys, a string's characters.
absl::StatusOr<List> AsList(const Value& v, const std::string& callee);
// The (key, value) tuples of a dict; dictsort's sorted by key.
absl::StatusOr<Value> DictFilter(const std::string& name, const Value& operand);

}  // namespace attn::jinja
