#include "model/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace attn::jinja {

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}

Value Value::Float(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.d_ = d;
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::MakeList(List items, bool is_tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.tuple_ = is_tuple;
  v.list_ = std::make_shared<const List>(std::move(items));
  return v;
}

Value Value::MakeDict(Dict entries, bool is_namespace) {
  Value v;
  v.kind_ = Kind::kDict;
  v.namespace_ = is_namespace;
  v.dict_ = std::make_shared<Dict>(std::move(entries));
  return v;
}

Value Value::MakeFunction(Function fn) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.fn_ = std::make_shared<const Function>(std::move(fn));
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::json::value_t::null:
      return None();
    case nlohmann::json::value_t::boolean:
      return Bool(json.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Int(json.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Float(static_cast<double>(u));
      return Int(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Float(json.get<double>());
    case nlohmann::json::value_t::string:
      return String(json.get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(FromJson(item));
      return MakeList(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict entries;
      entries.reserve(json.size());
      for (const auto& [key, item] : json.items()) entries.emplace_back(key, FromJson(item));
      return MakeDict(std::move(entries));
    }
    default:
      return None();  // binary and discarded values do not come from JSON text
  }
}

const Value* Value::Find(const std::string& key) const {
  if (kind_ != Kind::kDict) return nullptr;
  for (const auto& [k, v] : *dict_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Value::SetAttribute(const std::string& key, Value value) const {
  for (auto& [k, v] : *dict_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  dict_->emplace_back(key, std::move(value));
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return d_ != 0;
    case Kind::kString:
      return !s_->empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return !dict_->empty();
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, laid out as Python's repr does: positional
  // for exponents in [-4, 16), scientific otherwise.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, end);
  size_t e = sci.find('e');
  int exponent = std::stoi(sci.substr(e + 1));
  std::string digits;
  bool negative = sci[0] == '-';
  for (size_t i = negative ? 1 : 0; i < e; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  std::string out = negative ? "-" : "";
  if (exponent >= 16 || exponent < -4) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp;
  }
  if (exponent < 0) return out + "0." + std::string(-exponent - 1, '0') + digits;
  if (static_cast<int>(digits.size()) <= exponent + 1) {
    return out + digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
  }
  return out + digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
}

namespace {

std::string StringRepr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

void JsonString(const std::string& s, std::string* out) {
  *out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char hex[8];
          std::snprintf(hex, sizeof(hex), "\\u%04x", c);
          *out += hex;
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
  *out += '"';
}

absl::Status AppendJson(const Value& v, int indent, bool sort_keys, int depth, std::string* out) {
  if (depth > 256) return absl::InvalidArgumentError("tojson: value nested too deeply");
  auto newline = [&](int level) {
    if (indent < 0) return;
    *out += '\n';
    out->append(static_cast<size_t>(indent) * level, ' ');
  };
  const char* item_separator = indent < 0 ? ", " : ",";
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return absl::InvalidArgumentError("tojson: an undefined value is not JSON");
    case Value::Kind::kFunction:
      return absl::InvalidArgumentError("tojson: a function is not JSON");
    case Value::Kind::kNone:
      *out += "null";
      return absl::OkStatus();
    case Value::Kind::kBool:
      *out += v.bool_value() ? "true" : "false";
      return absl::OkStatus();
    case Value::Kind::kInt:
      *out += std::to_string(v.int_value());
      return absl::OkStatus();
    case Value::Kind::kFloat: {
      double d = v.number();
      *out += std::isnan(d)   ? "NaN"
              : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                              : FloatRepr(d);
      return absl::OkStatus();
    }
    case Value::Kind::kString:
      JsonString(v.str(), out);
      return absl::OkStatus();
    case Value::Kind::kList: {
      if (v.list().empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      *out += '[';
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i > 0) *out += item_separator;
        newline(depth + 1);
        absl::Status s = AppendJson(v.list()[i], indent, sort_keys, depth + 1, out);
        if (!s.ok()) return s;
      }
      newline(depth);
      *out += ']';
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      if (v.dict().empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& entry : v.dict()) entries.push_back(&entry);
      if (sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      *out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) *out += item_separator;
        newline(depth + 1);
        JsonString(entries[i]->first, out);
        *out += ": ";
        absl::Status s = AppendJson(entries[i]->second, indent, sort_keys, depth + 1, out);
        if (!s.ok()) return s;
      }
      newline(depth);
      *out += '}';
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return *s_;
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(i_);
    case Kind::kFloat:
      return FloatRepr(d_);
    case Kind::kString:
      return StringRepr(*s_);
    case Kind::kList: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i > 0) out += ", ";
        out += (*list_)[i].Repr();
      }
      if (tuple_) return out + (list_->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Kind::kDict: {
      std::string out = namespace_ ? "<Namespace {" : "{";
      for (size_t i = 0; i < dict_->size(); ++i) {
        if (i > 0) out += ", ";
        out += StringRepr((*dict_)[i].first) + ": " + (*dict_)[i].second.Repr();
      }
      return out + (namespace_ ? "}>" : "}");
    }
    case Kind::kFunction:
      return "<function>";
  }
  return "";
}

std::string Value::TypeName() const {
  static const char* const kNames[] = {"undefined", "NoneType", "bool", "int",     "float",
                                       "str",       "list",     "dict", "function"};
  if (is_namespace()) return "Namespace";
  return kNames[static_cast<int>(kind_)];
}

absl::StatusOr<std::string> Value::ToJson(int indent, bool sort_keys) const {
  std::string out;
  absl::Status s = AppendJson(*this, indent, sort_keys, 0, &out);
  if (!s.ok()) return s;
  return out;
}

nlohmann::ordered_json Value::AsJson() const {
  switch (kind_) {
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_;
    case Kind::kFloat:
      return d_;
    case Kind::kString:
      return *s_;
    case Kind::kList: {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (const Value& item : *list_) out.push_back(item.AsJson());
      return out;
    }
    case Kind::kDict: {
      nlohmann::ordered_json out = nlohmann::ordered_json::object();
      for (const auto& [k, v] : *dict_) out[k] = v.AsJson();
      return out;
    }
    default:
      return nullptr;
  }
}

bool Equal(const Value& a, const Value& b) {
  using Kind = Value::Kind;
  auto numeric = [](const Value& v) { return v.is_number() || v.kind() == Kind::kBool; };
  if (numeric(a) && numeric(b)) {
    auto as_double = [](const Value& v) {
      return v.kind() == Kind::kBool ? (v.bool_value() ? 1.0 : 0.0) : v.number();
    };
    if (a.kind() == Kind::kInt && b.kind() == Kind::kInt) return a.int_value() == b.int_value();
    return as_double(a) == as_double(b);
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.str() == b.str();
    case Kind::kList:
      if (a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i) {
        if (!Equal(a.list()[i], b.list()[i])) return false;
      }
      return true;
    case Kind::kDict:
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [k, v] : a.dict()) {
        const Value* other = b.Find(k);
        if (other == nullptr || !Equal(v, *other)) return false;
      }
      return true;
    default:
      return &a.function() == &b.function();
  }
}

absl::StatusOr<int> Compare(const Value& a, const Value& b) {
  auto numeric = [](const Value& v) { return v.is_number() || v.kind() == Value::Kind::kBool; };
  if (numeric(a) && numeric(b)) {
    auto as_double = [](const Value& v) {
      return v.kind() == Value::Kind::kBool ? (v.bool_value() ? 1.0 : 0.0) : v.number();
    };
    if (a.kind() == Value::Kind::kInt && b.kind() == Value::Kind::kInt) {
      return a.int_value() < b.int_value() ? -1 : a.int_value() > b.int_value() ? 1 : 0;
    }
    double x = as_double(a), y = as_double(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list()) {
    size_t n = std::min(a.list().size(), b.list().size());
    for (size_t i = 0; i < n; ++i) {
      if (Equal(a.list()[i], b.list()[i])) continue;
      return Compare(a.list()[i], b.list()[i]);
    }
    return a.list().size() < b.list().size() ? -1 : a.list().size() > b.list().size() ? 1 : 0;
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' is not supported between instances of '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

Value CallArgs::Take(size_t index, const std::string& name) {
  if (taken_positional.size() < positional.size()) taken_positional.resize(positional.size());
  if (index < positional.size()) {
    taken_positional[index] = true;
    return positional[index];
  }
  for (auto it = keyword.begin(); it != keyword.end(); ++it) {
    if (it->first == name) {
      Value v = std::move(it->second);
      keyword.erase(it);
      return v;
    }
  }
  return Value();
}

absl::Status CallArgs::Unused(const std::string& callee) const {
  for (size_t i = 0; i < positional.size(); ++i) {
    if (i >= taken_positional.size() || !taken_positional[i]) {
      return absl::InvalidArgumentError(absl::StrCat(callee, "() takes ", i, " positional argument",
                                                     i == 1 ? "" : "s", " but ", positional.size(),
                                                     " were given"));
    }
  }
  if (!keyword.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(callee, "() got an unexpected keyword argument '", keyword[0].first, "'"));
  }
  return absl::OkStatus();
}

}  // namespace attn::jinja
