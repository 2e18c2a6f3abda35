// The values a chat template computes with, with Python's semantics as
// Jinja2 gives them: None, booleans, 64-bit integers, doubles, strings,
// lists and insertion-ordered dicts (JSON's types), plus Jinja's undefined,
// namespaces (dicts that `set ns.x = ...` may change) and callables
// (macros and loop.cycle). Lists and dicts are shared, immutable once built
// (templates run sandboxed, as Hugging Face renders them: no append), so a
// copy of a Value is cheap.
//
// Printing follows Python's str() (`{{ x }}`): None -> "None", true ->
// "True", 1.0 -> "1.0", ['a', 1] -> "['a', 1]"; ToJson follows json.dumps
// with ensure_ascii=False (the tojson filter of Hugging Face and vLLM).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace attn::jinja {

class Value;
using List = std::vector<Value>;
// Keys are strings, as in JSON; a template's own dict literals are too.
using Dict = std::vector<std::pair<std::string, Value>>;

struct CallArgs;
using Function = std::function<absl::StatusOr<Value>(CallArgs&)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() = default;  // undefined
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double d);
  static Value String(std::string s);
  static Value MakeList(List items, bool is_tuple = false);  // a tuple prints as (a, b)
  static Value MakeDict(Dict entries, bool is_namespace = false);
  static Value MakeFunction(Function fn);
  static Value FromJson(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_namespace() const { return kind_ == Kind::kDict && namespace_; }

  bool bool_value() const { return b_; }
  int64_t int_value() const { return i_; }
  double number() const { return kind_ == Kind::kFloat ? d_ : static_cast<double>(i_); }
  const std::string& str() const { return *s_; }
  const List& list() const { return *list_; }
  const Dict& dict() const { return *dict_; }
  const Function& function() const { return *fn_; }

  // The entry for `key`, or nullptr.
  const Value* Find(const std::string& key) const;
  // A namespace's attribute; the only mutation templates can make.
  void SetAttribute(const std::string& key, Value value) const;

  bool Truthy() const;           // Python's bool()
  std::string Str() const;       // Python's str(), "" for undefined
  std::string Repr() const;      // Python's repr()
  std::string TypeName() const;  // for errors: "str", "int", "list", ...
  // json.dumps(value, ensure_ascii=False, indent=indent, separators=...)
  // with indent < 0 meaning none; fails on undefined and callables.
  absl::StatusOr<std::string> ToJson(int indent = -1, bool sort_keys = false) const;
  nlohmann::ordered_json AsJson() const;  // undefined and callables become null

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  bool namespace_ = false;
  bool tuple_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<const List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Function> fn_;
};

// Python's ==, and the order of <, <= ... (numbers with numbers, strings
// with strings, lists element-wise); Compare fails on other pairs.
bool Equal(const Value& a, const Value& b);
absl::StatusOr<int> Compare(const Value& a, const Value& b);

// Python's repr() of a double: shortest round-trip digits, "1.0", "1e+16".
std::string FloatRepr(double d);

// The arguments of a call: positional, then keyword in the order written.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index` or named `name`, or undefined; Take removes a
  // keyword it returns so that Unused can name what nobody asked for.
  Value Take(size_t index, const std::string& name);
  absl::Status Unused(const std::string& callee) const;
  std::vector<bool> taken_positional;
};

}  // namespace attn::jinja
