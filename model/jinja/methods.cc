// The Python methods of str and dict that chat templates call, and the
// globals Hugging Face adds (range, namespace, dict, raise_exception,
// strftime_now).
#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/jinja/builtins.h"
#include "model/jinja/strings.h"

namespace attn::jinja {

namespace {

absl::StatusOr<Value> StringMethod(const std::string& s, const std::string& name, CallArgs& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    Value chars = args.Take(0, "chars");
    return Value::String(Strip(s, chars, name[0] != 'r', name[0] != 'l'));
  }
  if (name == "split" || name == "rsplit") {
    Value sep = args.Take(0, "sep");
    int64_t maxsplit = IntArg(args.Take(1, "maxsplit"), -1);
    return StringList(Split(s, sep, maxsplit, name[0] == 'r'));
  }
  if (name == "splitlines") {
    std::vector<std::string> lines = Split(s, Value::String("\n"), -1, false);
    if (!lines.empty() && lines.back().empty()) lines.pop_back();
    return StringList(lines);
  }
  if (name == "startswith" || name == "endswith") {
    Value prefix = args.Take(0, "prefix");
    List options = prefix.is_list() ? prefix.list() : List{prefix};
    for (const Value& p : options) {
      if (!p.is_string()) return ArgError(name, "expects a string or a tuple of strings");
      const std::string& t = p.str();
      bool hit = t.size() <= s.size() &&
                 (name[0] == 's' ? s.compare(0, t.size(), t) == 0
                                 : s.compare(s.size() - t.size(), t.size(), t) == 0);
      if (hit) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (name == "upper") return Value::String(Upper(s));
  if (name == "lower") return Value::String(Lower(s));
  if (name == "title") return Value::String(Title(s));
  if (name == "capitalize") return Value::String(Capitalize(s));
  if (name == "replace") {
    Value from = args.Take(0, "old"), to = args.Take(1, "new");
    return Value::String(Replace(s, from.Str(), to.Str(), IntArg(args.Take(2, "count"), -1)));
  }
  if (name == "find" || name == "rfind" || name == "count") {
    std::string sub = args.Take(0, "sub").Str();
    if (name == "count") {
      if (sub.empty()) return Value::Int(Length(Value::String(s)) + 1);
      int64_t n = 0;
      for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size()))
        ++n;
      return Value::Int(n);
    }
    size_t hit = name == "find" ? s.find(sub) : s.rfind(sub);
    if (hit == std::string::npos) return Value::Int(-1);
    return Value::Int(Length(Value::String(s.substr(0, hit))));
  }
  if (name == "join") {
    auto items = AsList(args.Take(0, "iterable"), "join");
    if (!items.ok()) return items.status();
    std::vector<std::string> parts;
    for (const Value& v : *items) parts.push_back(v.Str());
    return Value::String(absl::StrJoin(parts, s));
  }
  if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum") {
    if (s.empty()) return Value::Bool(false);
    for (unsigned char c : s) {
      bool ok = name == "isdigit"   ? std::isdigit(c)
                : name == "isspace" ? std::isspace(c)
                : name == "isalpha" ? std::isalpha(c)
                                    : std::isalnum(c);
      if (!ok) return Value::Bool(false);
    }
    return Value::Bool(true);
  }
  return absl::NotFoundError(name);
}

absl::StatusOr<Value> DictMethod(const Value& d, const std::string& name, CallArgs& args) {
  if (name == "get") {
    Value key = args.Take(0, "key");
    Value fallback = args.Take(1, "default");
    const Value* found = key.is_string() ? d.Find(key.str()) : nullptr;
    if (found != nullptr) return *found;
    return fallback.is_undefined() ? Value::None() : fallback;
  }
  if (name == "items") return DictFilter("items", d);
  if (name == "keys" || name == "values") {
    List out;
    for (const auto& [k, v] : d.dict()) out.push_back(name == "keys" ? Value::String(k) : v);
    return Value::MakeList(std::move(out));
  }
  return absl::NotFoundError(name);
}

}  // namespace

absl::StatusOr<Value> CallMethod(BuiltinContext& ctx, const Value& object, const std::string& name,
                                 CallArgs& args) {
  if (absl::Status s = ctx.charge(1 + std::max<int64_t>(0, Length(object))); !s.ok()) return s;
  absl::StatusOr<Value> result = absl::NotFoundError(name);
  if (object.is_string()) result = StringMethod(object.str(), name, args);
  if (object.is_dict() && !object.is_namespace()) result = DictMethod(object, name, args);
  if (!result.ok()) return result;
  if (absl::Status s = args.Unused(name); !s.ok()) return s;
  return result;
}

bool IsGlobal(const std::string& name) {
  return name == "range" || name == "namespace" || name == "dict" || name == "raise_exception" ||
         name == "strftime_now";
}

absl::StatusOr<Value> CallGlobal(BuiltinContext& ctx, const std::string& name, CallArgs& args) {
  if (name == "raise_exception") {
    return absl::InvalidArgumentError(args.Take(0, "message").Str());
  }
  if (name == "strftime_now") return Value::String(ctx.strftime_now(args.Take(0, "format").Str()));
  if (name == "namespace" || name == "dict") {
    Dict entries;
    if (!args.positional.empty() && args.positional[0].is_dict())
      entries = args.positional[0].dict();
    for (auto& [k, v] : args.keyword) entries.emplace_back(k, v);
    return Value::MakeDict(std::move(entries), name == "namespace");
  }
  // range(stop) or range(start, stop[, step])
  if (args.positional.empty() || args.positional.size() > 3) {
    return ArgError("range", "expects 1 to 3 integers");
  }
  int64_t start = 0, stop, step = 1;
  if (args.positional.size() == 1) {
    stop = IntArg(args.positional[0], 0);
  } else {
    start = IntArg(args.positional[0], 0);
    stop = IntArg(args.positional[1], 0);
    if (args.positional.size() == 3) step = IntArg(args.positional[2], 1);
  }
  if (step == 0) return ArgError("range", "step must not be zero");
  int64_t count = step > 0 ? (stop - start + step - 1) / step : (start - stop - step - 1) / -step;
  if (count > 0) {
    if (absl::Status s = ctx.charge(count); !s.ok()) return s;
  }
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::Int(i));
  return Value::MakeList(std::move(out));
}

}  // namespace attn::jinja
