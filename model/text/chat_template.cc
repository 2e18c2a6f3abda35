#include "model/text/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace attn {
namespace {

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// A special token as tokenizer_config.json writes it: a string, or an
// AddedToken object with its "content".
std::string TokenText(const OrderedJson& config, const char* key) {
  if (!config.contains(key)) return "";
  const OrderedJson& token = config[key];
  if (token.is_string()) return token.get<std::string>();
  if (token.is_object() && token.contains("content") && token["content"].is_string()) {
    return token["content"].get<std::string>();
  }
  return "";
}

// tokenizer_config.json's chat_template: a string, or [{"name", "template"}].
absl::Status ConfigTemplates(const OrderedJson& value, const std::string& path,
                             std::map<std::string, std::string>* templates) {
  if (value.is_string()) {
    (*templates)["default"] = value.get<std::string>();
    return absl::OkStatus();
  }
  if (!value.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": chat_template: must be a string or a list of named templates"));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const OrderedJson& entry = value[i];
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
        !entry.contains("template") || !entry["template"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": chat_template[", i, "]: must be {\"name\": ..., \"template\": ...}"));
    }
    (*templates)[entry["name"].get<std::string>()] = entry["template"].get<std::string>();
  }
  return absl::OkStatus();
}

// clean_up_tokenization_spaces when it is a boolean; false otherwise.
bool CleanUpFlag(const OrderedJson& json) {
  const auto flag = json.find("clean_up_tokenization_spaces");
  return flag != json.end() && flag->is_boolean() && flag->get<bool>();
}

// Every template parses, or the error names `where` and the line.
absl::Status CheckTemplates(const ChatTemplateConfig& config, const std::string& where) {
  for (const auto& [name, text] : config.templates) {
    auto parsed = jinja::Template::Parse(text);
    if (!parsed.ok()) {
      const std::string which = config.templates.size() > 1 ? " (template \"" + name + "\")" : "";
      return absl::InvalidArgumentError(
          absl::StrCat(where, which, ": ", parsed.status().message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string ChatTemplateConfig::ToJson() const {
  OrderedJson json = {{"source", source}, {"templates", OrderedJson::object()}};
  for (const auto& [name, text] : templates) json["templates"][name] = text;
  json["bos_token"] = bos_token;
  json["eos_token"] = eos_token;
  json["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces;
  return json.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

absl::StatusOr<ChatTemplateConfig> ChatTemplateConfig::FromJson(const std::string& text) {
  OrderedJson json = OrderedJson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object() || !json.contains("templates") ||
      !json["templates"].is_object()) {
    return absl::InvalidArgumentError("chat_template: not an object with templates");
  }
  ChatTemplateConfig config;
  for (const auto& [name, value] : json["templates"].items()) {
    if (!value.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat_template: templates.", name, ": not a string"));
    }
    config.templates[name] = value.get<std::string>();
  }
  auto text_of = [&](const char* key) {
    return json.contains(key) && json[key].is_string() ? json[key].get<std::string>() : "";
  };
  config.source = text_of("source");
  config.bos_token = text_of("bos_token");
  config.eos_token = text_of("eos_token");
  config.clean_up_tokenization_spaces = CleanUpFlag(json);
  if (absl::Status s = CheckTemplates(config, "chat_template"); !s.ok()) return s;
  return config;
}

absl::StatusOr<ChatTemplateConfig> ParseTokenizerConfig(const std::string& text,
                                                        const std::string& path) {
  OrderedJson json = OrderedJson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  ChatTemplateConfig config;
  config.bos_token = TokenText(json, "bos_token");
  config.eos_token = TokenText(json, "eos_token");
  config.clean_up_tokenization_spaces = CleanUpFlag(json);
  if (json.contains("chat_template") && !json["chat_template"].is_null()) {
    if (absl::Status s = ConfigTemplates(json["chat_template"], path, &config.templates); !s.ok()) {
      return s;
    }
    config.source = "tokenizer_config.json";
  }
  return config;
}

absl::StatusOr<ChatTemplateConfig> ReadChatTemplate(const std::string& dir,
                                                    const std::string& override_file) {
  ChatTemplateConfig config;
  std::error_code error;
  const std::string config_path = (fs::path(dir) / "tokenizer_config.json").string();
  if (!dir.empty() && fs::exists(config_path, error)) {
    absl::StatusOr<std::string> text = ReadText(config_path);
    if (!text.ok()) return text.status();
    absl::StatusOr<ChatTemplateConfig> parsed = ParseTokenizerConfig(*text, config_path);
    if (!parsed.ok()) return parsed.status();
    config = *std::move(parsed);
  }
  const std::string jinja_path = (fs::path(dir) / "chat_template.jinja").string();
  if (!dir.empty() && override_file.empty() && fs::exists(jinja_path, error)) {
    absl::StatusOr<std::string> text = ReadText(jinja_path);
    if (!text.ok()) return text.status();
    config.templates = {{"default", *text}};
    config.source = "chat_template.jinja";
  }
  if (!override_file.empty()) return OverrideChatTemplate(std::move(config), override_file);
  if (absl::Status s = CheckTemplates(config, (fs::path(dir) / config.source).string()); !s.ok()) {
    return s;
  }
  return config;
}

absl::StatusOr<ChatTemplateConfig> OverrideChatTemplate(ChatTemplateConfig config,
                                                        const std::string& file) {
  absl::StatusOr<std::string> text = ReadText(file);
  if (!text.ok()) {
    return absl::NotFoundError(absl::StrCat("--chat_template: ", text.status().message()));
  }
  config.templates = {{"default", *text}};
  config.source = fs::path(file).filename().string();
  if (absl::Status s = CheckTemplates(config, file); !s.ok()) return s;
  return config;
}

std::string DetectToolCallFormat(const std::string& text) {
  auto has = [&](const char* marker) { return text.find(marker) != std::string::npos; };
  if (has("<|tool_call_start|>")) return "lfm2";
  if (has("[TOOL_CALLS]")) return "mistral";
  if (has("<|tool_call|>")) return "granite";
  if (has("<tool_call>")) return "hermes";
  if (has("<|python_tag|>") || has("\"parameters\": dictionary of argument name")) {
    return "llama3-json";
  }
  return "";
}

absl::StatusOr<std::shared_ptr<const ChatTemplate>> ChatTemplate::Create(
    ChatTemplateConfig config) {
  auto out = std::shared_ptr<ChatTemplate>(new ChatTemplate());
  for (const auto& [name, text] : config.templates) {
    auto parsed = jinja::Template::Parse(text);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat template \"", name, "\": ", parsed.status().message()));
    }
    out->parsed_.emplace(name, *std::move(parsed));
    std::string format = DetectToolCallFormat(text);
    if (!format.empty() && (out->tool_call_format_.empty() || name == "tool_use")) {
      out->tool_call_format_ = format;
    }
  }
  if (out->parsed_.empty()) return absl::InvalidArgumentError("chat template: none given");
  out->config_ = std::move(config);
  return std::shared_ptr<const ChatTemplate>(std::move(out));
}

absl::StatusOr<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                                 bool add_generation_prompt,
                                                 const std::string& tools_json) const {
  OrderedJson vars = {{"messages", OrderedJson::array()}};
  for (const ChatMessage& m : messages) {
    OrderedJson message = OrderedJson::parse(m.json, nullptr, /*allow_exceptions=*/false);
    if (!message.is_object()) message = {{"role", m.role}, {"content", m.content}};
    vars["messages"].push_back(std::move(message));
  }
  const OrderedJson tool_list = OrderedJson::parse(tools_json, nullptr, /*allow_exceptions=*/false);
  const bool tools = tool_list.is_array() && !tool_list.empty();
  if (tools) vars["tools"] = tool_list;
  vars["add_generation_prompt"] = add_generation_prompt;
  if (!config_.bos_token.empty()) vars["bos_token"] = config_.bos_token;
  if (!config_.eos_token.empty()) vars["eos_token"] = config_.eos_token;
  auto named = parsed_.find(tools && parsed_.count("tool_use") ? "tool_use" : "default");
  const jinja::Template& tmpl = named != parsed_.end() ? named->second : parsed_.begin()->second;
  auto text = tmpl.Render(vars);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("the model's chat template (", config_.source,
                                     "): ", text.status().message()));
  }
  return text;
}

std::string CleanUpTokenizationSpaces(const std::string& text) {
  static const std::pair<const char*, const char*> kJoins[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  std::string out = text;
  for (const auto& [from, to] : kJoins) {
    std::string next;
    const std::string f = from;
    size_t pos = 0;
    for (size_t hit = out.find(f); hit != std::string::npos; hit = out.find(f, pos)) {
      next += out.substr(pos, hit - pos) + to;
      pos = hit + f.size();
    }
    out = next + out.substr(pos);
  }
  return out;
}

}  // namespace attn
