#include "model/text/tool_calls.h"

#include <cctype>
#include <utility>

#include "nlohmann/json.hpp"
#include "util/enum_names.h"

namespace attn {
namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr std::pair<ToolCallFormat, const char*> kToolCallFormatNames[] = {
    {ToolCallFormat::kNone, ""},
    {ToolCallFormat::kHermes, "hermes"},
    {ToolCallFormat::kLlama3Json, "llama3-json"},
    {ToolCallFormat::kLfm2, "lfm2"},
    {ToolCallFormat::kMistral, "mistral"},
    {ToolCallFormat::kGranite, "granite"},
};

constexpr char kPythonTag[] = "<|python_tag|>";

// Compact JSON text; bytes that are not UTF-8 (a model may write any)
// become U+FFFD instead of failing.
std::string Compact(const OrderedJson& json) {
  return json.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

// Where a call starts and, for the formats that close it, ends.
struct Markers {
  const char* start;
  const char* end;  // null: the call runs to the end of the reply
};

Markers MarkersOf(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return {"<tool_call>", "</tool_call>"};
    case ToolCallFormat::kLfm2:
      return {"<|tool_call_start|>", "<|tool_call_end|>"};
    case ToolCallFormat::kMistral:
      return {"[TOOL_CALLS]", nullptr};
    case ToolCallFormat::kGranite:
      return {"<|tool_call|>", nullptr};
    default:
      return {nullptr, nullptr};
  }
}

std::string Trim(const std::string& s) {
  size_t begin = 0, end = s.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(s[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
  return s.substr(begin, end - begin);
}

// {"name": ..., "arguments" or "parameters": an object or its JSON text}.
bool CallOf(const OrderedJson& json, std::vector<ToolCall>* calls) {
  if (!json.is_object() || !json.contains("name") || !json["name"].is_string()) return false;
  OrderedJson arguments = OrderedJson::object();
  for (const char* key : {"arguments", "parameters"}) {
    if (!json.contains(key)) continue;
    arguments = json[key];
    if (arguments.is_string()) {
      arguments =
          OrderedJson::parse(arguments.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    }
    break;
  }
  if (!arguments.is_object()) return false;
  calls->push_back({json["name"].get<std::string>(), Compact(arguments)});
  return true;
}

// One JSON call object, or a list of them.
bool JsonCalls(const std::string& text, std::vector<ToolCall>* calls) {
  OrderedJson json = OrderedJson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return false;
  if (!json.is_array()) return CallOf(json, calls);
  if (json.empty()) return false;
  for (const OrderedJson& item : json) {
    if (!CallOf(item, calls)) return false;
  }
  return true;
}

// A Python literal (str, int, float, True/False/None, list, dict) or a
// call f(k=v, ...) in LFM2's list, read into JSON.
class PythonReader {
 public:
  explicit PythonReader(const std::string& text) : s_(text) {}

  bool Calls(std::vector<ToolCall>* calls) {
    if (!Eat('[')) return false;
    while (!Eat(']')) {
      if (!calls->empty() && !Eat(',')) return false;
      std::string name = Name();
      if (name.empty() || !Eat('(')) return false;
      OrderedJson arguments = OrderedJson::object();
      while (!Eat(')')) {
        if (!arguments.empty() && !Eat(',')) return false;
        std::string key = Name();
        OrderedJson value;
        if (key.empty() || !Eat('=') || !Literal(&value, 0)) return false;
        arguments[key] = std::move(value);
      }
      calls->push_back({name, Compact(arguments)});
    }
    Space();
    return pos_ == s_.size();
  }

 private:
  void Space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool Eat(char c) {
    Space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  std::string Name() {
    Space();
    size_t start = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) ||
                                s_[pos_] == '_' || (s_[pos_] == '.' && pos_ > start))) {
      ++pos_;
    }
    return s_.substr(start, pos_ - start);
  }
  bool String(OrderedJson* out) {
    char quote = s_[pos_++];
    std::string text;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      char c = s_[pos_++];
      if (c == '\\' && pos_ < s_.size()) {
        char e = s_[pos_++];
        c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
      }
      text += c;
    }
    if (pos_ >= s_.size()) return false;
    ++pos_;
    *out = text;
    return true;
  }
  bool Sequence(char close, bool dict, OrderedJson* out, int depth) {
    *out = dict ? OrderedJson::object() : OrderedJson::array();
    bool first = true;
    while (!Eat(close)) {
      if (!first && !Eat(',')) return false;
      first = false;
      OrderedJson key, value;
      if (dict) {
        Space();
        if (!Literal(&key, depth + 1) || !key.is_string() || !Eat(':')) return false;
      }
      if (!Literal(&value, depth + 1)) return false;
      if (dict) {
        (*out)[key.get<std::string>()] = std::move(value);
      } else {
        out->push_back(std::move(value));
      }
    }
    return true;
  }
  bool Literal(OrderedJson* out, int depth) {
    Space();
    if (pos_ >= s_.size() || depth > 64) return false;
    char c = s_[pos_];
    if (c == '"' || c == '\'') return String(out);
    if (c == '[') return ++pos_, Sequence(']', false, out, depth);
    if (c == '{') return ++pos_, Sequence('}', true, out, depth);
    size_t start = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) ||
                                s_[pos_] == '.' || s_[pos_] == '-' || s_[pos_] == '+')) {
      ++pos_;
    }
    const std::string word = s_.substr(start, pos_ - start);
    if (word == "True" || word == "False") return *out = word == "True", true;
    if (word == "None") return *out = nullptr, true;
    OrderedJson number = OrderedJson::parse(word, nullptr, /*allow_exceptions=*/false);
    if (number.is_discarded() || !number.is_number()) return false;
    *out = std::move(number);
    return true;
  }

  const std::string& s_;
  size_t pos_ = 0;
};

// Mistral V11: name[ARGS]{...}, repeated after [TOOL_CALLS] markers.
bool MistralV11Calls(const std::string& text, std::vector<ToolCall>* calls) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t args = text.find("[ARGS]", pos);
    if (args == std::string::npos) return false;
    const std::string name = Trim(text.substr(pos, args - pos));
    size_t next = text.find("[TOOL_CALLS]", args);
    const std::string body =
        text.substr(args + 6, next == std::string::npos ? std::string::npos : next - args - 6);
    OrderedJson arguments = OrderedJson::parse(body, nullptr, /*allow_exceptions=*/false);
    if (name.empty() || !arguments.is_object()) return false;
    calls->push_back({name, Compact(arguments)});
    pos = next == std::string::npos ? text.size() : next + 12;
  }
  return !calls->empty();
}

// The calls one marked segment holds (the text between a start marker and
// its end, or the end of the reply); false when it is not well formed.
bool SegmentCalls(ToolCallFormat format, const std::string& inner, std::vector<ToolCall>* calls) {
  std::vector<ToolCall> found;
  bool ok = false;
  switch (format) {
    case ToolCallFormat::kLfm2:
      ok = PythonReader(inner).Calls(&found);
      break;
    case ToolCallFormat::kMistral:
      ok = JsonCalls(Trim(inner), &found) || (found.clear(), MistralV11Calls(inner, &found));
      break;
    default:
      ok = JsonCalls(Trim(inner), &found);
  }
  if (!ok) return false;
  calls->insert(calls->end(), found.begin(), found.end());
  return true;
}

ToolCallText Llama3Json(const std::string& text) {
  std::string body = Trim(text);
  if (body.rfind(kPythonTag, 0) == 0) body = Trim(body.substr(sizeof(kPythonTag) - 1));
  ToolCallText out;
  if (!body.empty() && body[0] == '{') {
    std::vector<ToolCall> calls;
    size_t pos = 0;
    bool ok = true;
    while (ok && pos <= body.size()) {  // objects separated by ';'
      size_t semi = body.find("};", pos);
      std::string part =
          semi == std::string::npos ? body.substr(pos) : body.substr(pos, semi + 1 - pos);
      ok = JsonCalls(Trim(part), &calls);
      if (semi == std::string::npos) break;
      pos = semi + 2;
    }
    if (ok && !calls.empty()) {
      out.calls = std::move(calls);
      return out;
    }
  }
  out.content = text;
  return out;
}

// The longest end of `text` that begins `marker`: text that may still become one.
size_t PartialMarker(const std::string& text, const std::string& marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.compare(text.size() - n, n, marker, 0, n) == 0) return n;
  }
  return 0;
}

}  // namespace

std::string ToolCallFormatName(ToolCallFormat format) {
  return EnumName(kToolCallFormatNames, format);
}

bool ParseToolCallFormat(const std::string& name, ToolCallFormat* format) {
  return ParseEnumName(kToolCallFormatNames, name, format);
}

ToolCallText ParseToolCalls(ToolCallFormat format, const std::string& text) {
  if (format == ToolCallFormat::kLlama3Json) return Llama3Json(text);
  const Markers markers = MarkersOf(format);
  ToolCallText out;
  if (markers.start == nullptr) {
    out.content = text;
    return out;
  }
  const std::string start = markers.start;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t open = text.find(start, pos);
    if (open == std::string::npos) break;
    size_t body = open + start.size();
    size_t close = markers.end == nullptr ? std::string::npos : text.find(markers.end, body);
    size_t after =
        close == std::string::npos ? text.size() : close + std::string(markers.end).size();
    std::string inner =
        text.substr(body, close == std::string::npos ? std::string::npos : close - body);
    out.content += text.substr(pos, open - pos);
    if (!SegmentCalls(format, inner, &out.calls)) out.content += text.substr(open, after - open);
    pos = after;
  }
  if (pos < text.size()) out.content += text.substr(pos);
  return out;
}

ToolCallText ToolCallStream::Push(const std::string& text) {
  pending_ += text;
  return Release(/*final=*/false);
}

ToolCallText ToolCallStream::Finish() { return Release(/*final=*/true); }

ToolCallText ToolCallStream::Push(const std::string& text, bool last) {
  pending_ += text;
  return Release(/*final=*/last);
}

ToolCallText ToolCallStream::Release(bool final) {
  ToolCallText out;
  if (final || format_ == ToolCallFormat::kNone) {
    out = ParseToolCalls(format_, pending_);
    pending_.clear();
    return out;
  }
  if (format_ == ToolCallFormat::kLlama3Json) {
    // A call is the whole reply: hold it while it may still be one.
    const std::string head = Trim(pending_);
    const std::string tag = kPythonTag;
    const bool maybe =
        head.empty() || head[0] == '{' || tag.rfind(head.substr(0, tag.size()), 0) == 0;
    if (!maybe) {
      format_ = ToolCallFormat::kNone;  // plain text from here on
      out.content = std::move(pending_);
      pending_.clear();
    }
    return out;
  }
  const Markers markers = MarkersOf(format_);
  const std::string start = markers.start;
  size_t open = pending_.find(start);
  if (open == std::string::npos) {
    // Everything but an end that may begin the marker.
    size_t keep = PartialMarker(pending_, start);
    out.content = pending_.substr(0, pending_.size() - keep);
    pending_.erase(0, pending_.size() - keep);
    return out;
  }
  if (markers.end == nullptr) {  // the call runs to the reply's end: hold it
    out.content = pending_.substr(0, open);
    pending_.erase(0, open);
    return out;
  }
  size_t close = pending_.find(markers.end, open + start.size());
  if (close == std::string::npos) {
    out.content = pending_.substr(0, open);
    pending_.erase(0, open);
    return out;
  }
  const size_t after = close + std::string(markers.end).size();
  out = ParseToolCalls(format_, pending_.substr(0, after));
  pending_.erase(0, after);
  ToolCallText more = Release(false);
  out.content += more.content;
  out.calls.insert(out.calls.end(), more.calls.begin(), more.calls.end());
  return out;
}

std::vector<ChatMessage> HermesToolTurns(const std::vector<ChatMessage>& messages,
                                         const std::string& tools_json) {
  std::vector<ChatMessage> out;
  size_t first = 0;
  const OrderedJson tools = OrderedJson::parse(tools_json, nullptr, /*allow_exceptions=*/false);
  if (tools.is_array() && !tools.empty()) {
    std::string text =
        "# Tools\n\nYou may call one or more of these functions to answer:\n<tools>\n";
    for (const OrderedJson& tool : tools) text += Compact(tool) + "\n";
    text +=
        "</tools>\n\nTo call a function, write its name and arguments as a JSON object between "
        "<tool_call> and </tool_call>:\n<tool_call>\n{\"name\": <function name>, \"arguments\": "
        "<arguments as a JSON object>}\n</tool_call>";
    const bool has_system = !messages.empty() && messages[0].role == "system";
    out.push_back({"system", has_system ? messages[0].content + "\n\n" + text : text});
    first = has_system ? 1 : 0;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") {
      const std::string block = "<tool_response>\n" + m.content + "\n</tool_response>";
      if (i > first && messages[i - 1].role == "tool") {
        out.back().content += "\n" + block;
      } else {
        out.push_back({"user", block});
      }
      continue;
    }
    ChatMessage turn{m.role, m.content};
    const OrderedJson json = OrderedJson::parse(m.json, nullptr, /*allow_exceptions=*/false);
    if (m.role == "assistant" && json.is_object() && json.contains("tool_calls") &&
        json["tool_calls"].is_array()) {
      for (const OrderedJson& call : json["tool_calls"]) {
        const OrderedJson function =
            call.is_object() ? call.value("function", OrderedJson::object()) : OrderedJson();
        if (!function.is_object()) continue;
        const OrderedJson written = {
            {"name", function.value("name", "")},
            {"arguments", function.value("arguments", OrderedJson::object())}};
        turn.content += (turn.content.empty() ? "" : "\n") + std::string("<tool_call>\n") +
                        Compact(written) + "\n</tool_call>";
      }
    }
    out.push_back(std::move(turn));
  }
  return out;
}

}  // namespace attn
