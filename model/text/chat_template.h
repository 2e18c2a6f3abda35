// A model's own chat template: the Jinja template its Hugging Face files
// ship (chat_template.jinja, or tokenizer_config.json's "chat_template", a
// string or a list of named templates), with the special tokens it prints
// (bos_token, eos_token) and the detokenizer's clean-up flag, as attn-export
// records them in a package and the server renders them
// (model/jinja/template.h). A package without one uses its built-in chat
// format (chat_format.h).
//
// Which template, as Hugging Face and vLLM choose: a file given with
// --chat_template wins, then chat_template.jinja beside the tokenizer, then
// tokenizer_config.json's. Of a list of named templates, "tool_use" renders
// requests with tools when there is one, "default" (or the only one) the rest.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/jinja/template.h"
#include "model/text/chat_format.h"

namespace attn {

struct ChatTemplateConfig {
  // Where the template came from: "chat_template.jinja",
  // "tokenizer_config.json", or the file --chat_template named.
  std::string source;
  std::map<std::string, std::string> templates;  // by name; one "default" when unnamed
  std::string bos_token, eos_token;              // as tokenizer_config.json names them
  bool clean_up_tokenization_spaces = false;

  // No template (the package renders chats in its chat_format) and nothing
  // else to record.
  bool empty() const {
    return templates.empty() && bos_token.empty() && eos_token.empty() &&
           !clean_up_tokenization_spaces;
  }
  // The package config's "chat_template" object, and back; FromJson
  // refuses one whose templates do not parse, naming the template's line.
  std::string ToJson() const;
  static absl::StatusOr<ChatTemplateConfig> FromJson(const std::string& json);
};

// What a tokenizer_config.json's `text` says of chats (its template, the
// special tokens, the clean-up flag); errors name `path`. Its templates are
// not parsed here.
absl::StatusOr<ChatTemplateConfig> ParseTokenizerConfig(const std::string& text,
                                                        const std::string& path);

// The template files of a Hugging Face directory `dir` (tokenizer_config.json,
// chat_template.jinja; neither is required: an empty config), or of
// `override_file` when not empty, which then supplies the template and
// leaves the special tokens and flags to the directory's config. Errors name
// the file, and the line of a template that does not parse.
absl::StatusOr<ChatTemplateConfig> ReadChatTemplate(const std::string& dir,
                                                    const std::string& override_file);

// The config with the template of `file` in place of its own, as
// --chat_template does at serve time.
absl::StatusOr<ChatTemplateConfig> OverrideChatTemplate(ChatTemplateConfig config,
                                                        const std::string& file);

// The tool-call format a template writes, from the markers its text holds:
// "hermes" (<tool_call>), "llama3-json", "lfm2" (<|tool_call_start|>),
// "mistral" ([TOOL_CALLS]), "granite" (<|tool_call|>), or "" for none.
std::string DetectToolCallFormat(const std::string& template_text);

// A parsed ChatTemplateConfig, ready to render; thread-safe.
class ChatTemplate {
 public:
  static absl::StatusOr<std::shared_ptr<const ChatTemplate>> Create(ChatTemplateConfig config);

  // The prompt for `messages` (each ChatMessage::json when set, else its
  // role and content) and `tools_json` (a JSON array, or empty for none).
  // kInvalidArgument for the template's own refusals (raise_exception) and
  // its errors, naming the template's line; kResourceExhausted past the
  // render limits.
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     bool add_generation_prompt,
                                     const std::string& tools_json = "") const;

  const ChatTemplateConfig& config() const { return config_; }
  const std::string& tool_call_format() const { return tool_call_format_; }

 private:
  ChatTemplateConfig config_;
  std::map<std::string, jinja::Template> parsed_;
  std::string tool_call_format_;
};

// Hugging Face's clean_up_tokenization: " ." -> "." and the like, and
// " n't", " 's"... joined to the word before, for decoders whose config
// asks for it.
std::string CleanUpTokenizationSpaces(const std::string& text);

}  // namespace attn
