#include "model/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/jinja/strings.h"

namespace attn::jinja {

absl::Status ArgError(const std::string& callee, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(callee, ": ", what));
}

Value StringList(const std::vector<std::string>& parts) {
  List items;
  for (const std::string& p : parts) items.push_back(Value::String(p));
  return Value::MakeList(std::move(items));
}

int64_t IntArg(const Value& v, int64_t fallback) {
  if (v.kind() == Value::Kind::kInt) return v.int_value();
  if (v.kind() == Value::Kind::kBool) return v.bool_value() ? 1 : 0;
  if (v.kind() == Value::Kind::kFloat) return static_cast<int64_t>(v.number());
  return fallback;
}

namespace {

// An attribute path "a.b.0" of Jinja2's attribute= arguments.
Value Attribute(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (cur.is_list() && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      cur = Item(cur, Value::Int(std::stoll(part)));
    } else {
      const Value* found = cur.Find(part);
      cur = found != nullptr ? *found : Value();
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

}  // namespace

absl::StatusOr<List> AsList(const Value& v, const std::string& callee) {
  if (v.is_list()) return v.list();
  if (v.is_undefined()) return List();
  if (v.is_dict()) {
    List keys;
    for (const auto& [k, _] : v.dict()) keys.push_back(Value::String(k));
    return keys;
  }
  if (v.is_string()) {
    List chars;
    std::vector<size_t> cps = CodePoints(v.str());
    for (size_t i = 0; i + 1 < cps.size(); ++i) {
      chars.push_back(Value::String(v.str().substr(cps[i], cps[i + 1] - cps[i])));
    }
    return chars;
  }
  return ArgError(callee, absl::StrCat("'", v.TypeName(), "' object is not iterable"));
}

namespace {

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

absl::StatusOr<Value> Indent(const Value& operand, CallArgs& args) {
  Value width = args.Take(0, "width");
  bool first = args.Take(1, "first").Truthy();
  bool blank = args.Take(2, "blank").Truthy();
  std::string pad = width.is_string() ? width.str() : std::string(IntArg(width, 4), ' ');
  std::string s = operand.Str();
  std::string out;
  size_t pos = 0;
  bool is_first = true;
  while (true) {
    size_t nl = s.find('\n', pos);
    std::string line = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    bool indent = is_first ? first : (blank || !line.empty());
    if (!is_first) out += '\n';
    if (indent) out += pad;
    out += line;
    if (nl == std::string::npos) break;
    pos = nl + 1;
    is_first = false;
  }
  return Value::String(out);
}

absl::StatusOr<Value> SelectOrReject(BuiltinContext& ctx, const Value& operand, CallArgs& args,
                                     bool by_attribute, bool keep) {
  auto items = AsList(operand, "select");
  if (!items.ok()) return items.status();
  std::string attr;
  size_t next = 0;
  if (by_attribute) {
    if (args.positional.empty() || !args.positional[0].is_string()) {
      return ArgError("selectattr", "needs an attribute name");
    }
    attr = args.positional[0].str();
    next = 1;
  }
  std::string test = args.positional.size() > next && args.positional[next].is_string()
                         ? args.positional[next].str()
                         : "";
  CallArgs test_args;
  for (size_t i = next + 1; i < args.positional.size(); ++i) {
    test_args.positional.push_back(args.positional[i]);
  }
  List out;
  for (const Value& item : *items) {
    Value subject = by_attribute ? Attribute(item, attr) : item;
    bool pass;
    if (test.empty()) {
      pass = subject.Truthy();
    } else {
      CallArgs copy = test_args;
      auto r = ApplyTest(ctx, test, subject, copy);
      if (!r.ok()) return r.status();
      pass = *r;
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::MakeList(std::move(out));
}

absl::StatusOr<Value> Map(BuiltinContext& ctx, const Value& operand, CallArgs& args) {
  auto items = AsList(operand, "map");
  if (!items.ok()) return items.status();
  Value attribute = args.Take(99, "attribute");
  Value fallback = args.Take(99, "default");
  List out;
  if (attribute.is_string()) {
    for (const Value& item : *items) {
      Value v = Attribute(item, attribute.str());
      out.push_back(v.is_undefined() && !fallback.is_undefined() ? fallback : v);
    }
    return Value::MakeList(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    return ArgError("map", "needs a filter name or attribute=");
  }
  std::string filter = args.positional[0].str();
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  args.positional.clear();
  args.keyword.clear();
  for (const Value& item : *items) {
    CallArgs copy = rest;
    auto v = ApplyFilter(ctx, filter, item, copy);
    if (!v.ok()) return v.status();
    out.push_back(std::move(*v));
  }
  return Value::MakeList(std::move(out));
}

absl::StatusOr<Value> SortList(const Value& operand, CallArgs& args) {
  auto items = AsList(operand, "sort");
  if (!items.ok()) return items.status();
  bool reverse = args.Take(0, "reverse").Truthy();
  bool case_sensitive = args.Take(1, "case_sensitive").Truthy();
  Value attribute = args.Take(2, "attribute");
  auto key = [&](const Value& v) {
    Value k = attribute.is_string() ? Attribute(v, attribute.str()) : v;
    return k.is_string() && !case_sensitive ? Value::String(Lower(k.str())) : k;
  };
  absl::Status error;
  List sorted = *items;
  std::stable_sort(sorted.begin(), sorted.end(), [&](const Value& a, const Value& b) {
    auto c = Compare(key(a), key(b));
    if (!c.ok()) error = c.status();
    return c.ok() && (reverse ? *c > 0 : *c < 0);
  });
  if (!error.ok()) return error;
  return Value::MakeList(std::move(sorted));
}

absl::StatusOr<Value> ToJsonFilter(const Value& operand, CallArgs& args) {
  Value indent = args.Take(0, "indent");
  args.Take(99, "ensure_ascii");
  args.Take(99, "separators");
  bool sort_keys = args.Take(99, "sort_keys").Truthy();
  auto text = operand.ToJson(indent.is_none() || indent.is_undefined() ? -1 : IntArg(indent, -1),
                             sort_keys);
  if (!text.ok()) return text.status();
  return Value::String(std::move(*text));
}

absl::StatusOr<Value> Round(const Value& operand, CallArgs& args) {
  int64_t precision = IntArg(args.Take(0, "precision"), 0);
  Value method = args.Take(1, "method");
  std::string how = method.is_string() ? method.str() : "common";
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = operand.number() * scale;
  double r = how == "ceil"    ? std::ceil(x)
             : how == "floor" ? std::floor(x)
                              : std::nearbyint(x);  // Python's round: half to even
  return Value::Float(r / scale);
}

absl::StatusOr<Value> StringFilter(const std::string& name, const Value& operand, CallArgs& args) {
  std::string s = operand.Str();
  if (name == "trim") return Value::String(Strip(s, args.Take(0, "chars"), true, true));
  if (name == "upper") return Value::String(Upper(s));
  if (name == "lower") return Value::String(Lower(s));
  if (name == "capitalize") return Value::String(Capitalize(s));
  if (name == "title") return Value::String(Title(s));
  if (name == "string") return operand.is_string() ? operand : Value::String(s);
  if (name == "e" || name == "escape") return Value::String(HtmlEscape(s));
  if (name == "wordcount")
    return Value::Int(static_cast<int64_t>(Split(s, Value(), -1, false).size()));
  if (name == "replace") {
    Value from = args.Take(0, "old"), to = args.Take(1, "new");
    int64_t count = IntArg(args.Take(2, "count"), -1);
    return Value::String(Replace(s, from.Str(), to.Str(), count));
  }
  return absl::NotFoundError(name);
}

absl::StatusOr<Value> SequenceFilter(BuiltinContext& ctx, const std::string& name,
                                     const Value& operand, CallArgs& args) {
  if (name == "join") {
    auto items = AsList(operand, "join");
    if (!items.ok()) return items.status();
    Value sep = args.Take(0, "d");
    Value attribute = args.Take(1, "attribute");
    std::vector<std::string> parts;
    for (const Value& item : *items) {
      parts.push_back((attribute.is_string() ? Attribute(item, attribute.str()) : item).Str());
    }
    return Value::String(absl::StrJoin(parts, sep.is_undefined() ? "" : sep.Str()));
  }
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    auto r = SelectOrReject(ctx, operand, args, absl::EndsWith(name, "attr"), name[0] == 's');
    args.positional.clear();
    return r;
  }
  if (name == "map") return Map(ctx, operand, args);
  if (name == "sort") return SortList(operand, args);
  auto items = AsList(operand, name);
  if (!items.ok()) return items.status();
  if (name == "list") return Value::MakeList(std::move(*items));
  if (name == "first") return items->empty() ? Value() : items->front();
  if (name == "last") return items->empty() ? Value() : items->back();
  if (name == "reverse") {
    if (operand.is_string()) {
      std::string out;
      for (auto it = items->rbegin(); it != items->rend(); ++it) out += it->str();
      return Value::String(out);
    }
    return Value::MakeList(List(items->rbegin(), items->rend()));
  }
  if (name == "unique") {
    List out;
    for (const Value& v : *items) {
      if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return Equal(o, v); })) {
        out.push_back(v);
      }
    }
    return Value::MakeList(std::move(out));
  }
  if (name == "sum") {
    Value total = Value::Int(IntArg(args.Take(1, "start"), 0));
    for (const Value& v : *items) {
      if (!v.is_number()) return ArgError("sum", "items must be numbers");
      total = total.kind() == Value::Kind::kInt && v.kind() == Value::Kind::kInt
                  ? Value::Int(total.int_value() + v.int_value())
                  : Value::Float(total.number() + v.number());
    }
    return total;
  }
  if (name == "min" || name == "max") {
    if (items->empty()) return Value();
    Value best = (*items)[0];
    for (const Value& v : *items) {
      auto c = Compare(v, best);
      if (!c.ok()) return c.status();
      if (name == "min" ? *c < 0 : *c > 0) best = v;
    }
    return best;
  }
  return absl::NotFoundError(name);
}

}  // namespace

absl::StatusOr<Value> DictFilter(const std::string& name, const Value& operand) {
  if (!operand.is_dict() && !operand.is_undefined()) {
    return ArgError(name, absl::StrCat("expected a dict, not '", operand.TypeName(), "'"));
  }
  List pairs;
  if (operand.is_dict()) {
    for (const auto& [k, v] : operand.dict())
      pairs.push_back(Value::MakeList({Value::String(k), v}, true));
  }
  if (name == "dictsort") {
    std::stable_sort(pairs.begin(), pairs.end(), [](const Value& a, const Value& b) {
      return Lower(a.list()[0].str()) < Lower(b.list()[0].str());
    });
  }
  return Value::MakeList(std::move(pairs));
}

int64_t Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(CodePoints(v.str()).size()) - 1;
    case Value::Kind::kList:
      return static_cast<int64_t>(v.list().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict().size());
    default:
      return -1;
  }
}

Value Item(const Value& object, const Value& key) {
  if (object.is_dict()) {
    if (!key.is_string()) return Value();
    const Value* found = object.Find(key.str());
    return found != nullptr ? *found : Value();
  }
  if (key.kind() != Value::Kind::kInt) return Value();
  int64_t n = Length(object);
  int64_t i = key.int_value() < 0 ? key.int_value() + n : key.int_value();
  if (i < 0 || i >= n) return Value();
  if (object.is_list()) return object.list()[static_cast<size_t>(i)];
  if (object.is_string()) {
    std::vector<size_t> cps = CodePoints(object.str());
    return Value::String(object.str().substr(cps[i], cps[i + 1] - cps[i]));
  }
  return Value();
}

absl::StatusOr<Value> Slice(const Value& object, const Value& start, const Value& stop,
                            const Value& step_value) {
  int64_t n = Length(object);
  if (!object.is_list() && !object.is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("'", object.TypeName(), "' cannot be sliced"));
  }
  int64_t step = step_value.is_undefined() || step_value.is_none() ? 1 : IntArg(step_value, 1);
  if (step == 0) return absl::InvalidArgumentError("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t fallback) {
    if (v.is_undefined() || v.is_none()) return fallback;
    int64_t i = IntArg(v, 0);
    if (i < 0) i += n;
    if (step > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  int64_t a = clamp(start, step > 0 ? 0 : n - 1);
  int64_t b = clamp(stop, step > 0 ? n : -1);
  std::vector<int64_t> picked;
  for (int64_t i = a; step > 0 ? i < b : i > b; i += step) picked.push_back(i);
  if (object.is_list()) {
    List out;
    for (int64_t i : picked) out.push_back(object.list()[static_cast<size_t>(i)]);
    return Value::MakeList(std::move(out));
  }
  std::vector<size_t> cps = CodePoints(object.str());
  std::string out;
  for (int64_t i : picked) out += object.str().substr(cps[i], cps[i + 1] - cps[i]);
  return Value::String(std::move(out));
}

absl::StatusOr<Value> ApplyFilter(BuiltinContext& ctx, const std::string& name,
                                  const Value& operand, CallArgs& args) {
  if (absl::Status s = ctx.charge(1 + std::max<int64_t>(0, Length(operand))); !s.ok()) return s;
  absl::StatusOr<Value> result = absl::NotFoundError(name);
  if (name == "tojson") {
    result = ToJsonFilter(operand, args);
  } else if (name == "length" || name == "count") {
    int64_t n = Length(operand);
    if (n < 0) return ArgError(name, absl::StrCat("'", operand.TypeName(), "' has no length"));
    result = Value::Int(n);
  } else if (name == "default" || name == "d") {
    Value fallback = args.Take(0, "default_value");
    bool boolean = args.Take(1, "boolean").Truthy();
    bool use = operand.is_undefined() || (boolean && !operand.Truthy());
    result = use ? (fallback.is_undefined() ? Value::String("") : fallback) : operand;
  } else if (name == "items" || name == "dictsort") {
    result = DictFilter(name, operand);
  } else if (name == "int") {
    Value fallback = args.Take(0, "default");
    if (operand.is_number() || operand.kind() == Value::Kind::kBool) {
      result = Value::Int(IntArg(operand, 0));
    } else {
      char* end = nullptr;
      std::string s = Strip(operand.Str(), Value(), true, true);
      long long v = std::strtoll(s.c_str(), &end, 10);
      bool ok = !s.empty() && end == s.c_str() + s.size();
      result = ok ? Value::Int(v) : Value::Int(IntArg(fallback, 0));
    }
  } else if (name == "float") {
    Value fallback = args.Take(0, "default");
    std::string s = operand.Str();
    char* end = nullptr;
    double v = operand.is_number() ? operand.number() : std::strtod(s.c_str(), &end);
    bool ok = operand.is_number() || (!s.empty() && end == s.c_str() + s.size());
    result = Value::Float(ok ? v : (fallback.is_number() ? fallback.number() : 0.0));
  } else if (name == "abs") {
    if (!operand.is_number()) return ArgError("abs", "expected a number");
    result = operand.kind() == Value::Kind::kInt ? Value::Int(std::llabs(operand.int_value()))
                                                 : Value::Float(std::fabs(operand.number()));
  } else if (name == "round") {
    if (!operand.is_number()) return ArgError("round", "expected a number");
    result = Round(operand, args);
  } else if (name == "safe") {
    result = operand;
  } else if (name == "indent") {
    result = Indent(operand, args);
  } else {
    result = StringFilter(name, operand, args);
    if (absl::IsNotFound(result.status())) result = SequenceFilter(ctx, name, operand, args);
  }
  if (!result.ok()) return result;
  if (absl::Status s = args.Unused(name); !s.ok()) return s;
  return result;
}

absl::StatusOr<bool> ApplyTest(BuiltinContext& ctx, const std::string& name, const Value& v,
                               CallArgs& args) {
  if (absl::Status s = ctx.charge(1); !s.ok()) return s;
  using Kind = Value::Kind;
  Value other = args.Take(0, "value");
  static const std::map<std::string, std::string> kAliases = {
      {"==", "eq"}, {"equalto", "eq"},     {"!=", "ne"}, {"<", "lt"}, {"lessthan", "lt"},
      {">", "gt"},  {"greaterthan", "gt"}, {"<=", "le"}, {">=", "ge"}};
  auto alias = kAliases.find(name);
  const std::string& test = alias != kAliases.end() ? alias->second : name;
  if (test == "defined") return !v.is_undefined();
  if (test == "undefined") return v.is_undefined();
  if (test == "none") return v.is_none();
  if (test == "string") return v.is_string();
  if (test == "number") return v.is_number();
  if (test == "integer") return v.kind() == Kind::kInt;
  if (test == "float") return v.kind() == Kind::kFloat;
  if (test == "boolean") return v.kind() == Kind::kBool;
  if (test == "true") return v.kind() == Kind::kBool && v.bool_value();
  if (test == "false") return v.kind() == Kind::kBool && !v.bool_value();
  if (test == "mapping") return v.is_dict();
  if (test == "iterable") return v.is_list() || v.is_dict() || v.is_string();
  if (test == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (test == "callable") return v.kind() == Kind::kFunction;
  if (test == "lower") return v.is_string() && Lower(v.str()) == v.str();
  if (test == "upper") return v.is_string() && Upper(v.str()) == v.str();
  if (test == "odd" || test == "even") {
    if (v.kind() != Kind::kInt) return ArgError(test, "expected an integer");
    return (v.int_value() % 2 != 0) == (test == "odd");
  }
  if (test == "divisibleby") {
    if (v.kind() != Kind::kInt || other.kind() != Kind::kInt || other.int_value() == 0) {
      return ArgError(test, "expected integers");
    }
    return v.int_value() % other.int_value() == 0;
  }
  if (test == "eq" || test == "sameas") return Equal(v, other);
  if (test == "ne") return !Equal(v, other);
  if (test == "in") {
    if (other.is_list()) {
      return std::any_of(other.list().begin(), other.list().end(),
                         [&](const Value& x) { return Equal(x, v); });
    }
    if (other.is_string() && v.is_string()) return other.str().find(v.str()) != std::string::npos;
    return other.is_dict() && v.is_string() && other.Find(v.str()) != nullptr;
  }
  if (test == "lt" || test == "gt" || test == "le" || test == "ge") {
    auto c = Compare(v, other);
    if (!c.ok()) return c.status();
    return test == "lt" ? *c < 0 : test == "gt" ? *c > 0 : test == "le" ? *c <= 0 : *c >= 0;
  }
  return absl::NotFoundError(name);
}

}  // namespace attn::jinja
