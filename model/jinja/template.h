// A Jinja template, as chat models ship them (tokenizer_config.json's
// chat_template, chat_template.jinja), rendered as Hugging Face's
// apply_chat_template renders it with Jinja2: trim_blocks and lstrip_blocks,
// loop controls, a sandbox in which lists and dicts cannot change, a tojson
// that keeps key order and non-ASCII text, raise_exception and strftime_now.
// Covered: {{ }}, {% if/elif/else %}, {% for %} (tuple targets, `if`
// filters, else, loop.index/first/last/length/previtem/nextitem/cycle),
// {% set %} (names, namespace attributes, blocks), {% macro %}, {% break %},
// {% continue %}, {% raw %}, {% generation %}, Jinja2's operators, the
// common filters and tests, and the str/dict methods templates call.
// Anything else is refused when the template is parsed, naming the line.
//
// Templates are data from the internet, so a render is bounded: output
// size, work (loop iterations, calls) and macro recursion have limits, and a
// template that exceeds one fails with ResourceExhausted instead of hanging
// or exhausting memory. Errors name the template's line. Thread-safe: one
// parsed Template renders on many threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace attn::jinja {

struct RenderLimits {
  size_t max_output_bytes = 8u << 20;
  int64_t max_steps = 2'000'000;  // statements, loop iterations, calls, items built
  int max_call_depth = 100;       // nested macro calls
};

struct RenderOptions {
  RenderLimits limits;
  // strftime_now(format) in templates; null: the local time now.
  std::function<std::string(const std::string& format)> strftime_now;
};

class Template {
 public:
  // InvalidArgument naming the line for a syntax error or an unsupported tag.
  static absl::StatusOr<Template> Parse(std::string_view source);

  // The text for `variables` (a JSON object: messages, tools, bos_token,
  // add_generation_prompt...). InvalidArgument naming the line for an
  // error in the template, including its own raise_exception("...") (the
  // message is the template's); ResourceExhausted past a limit.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& variables,
                                     const RenderOptions& options = {}) const;

 private:
  struct Program;
  explicit Template(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

}  // namespace attn::jinja
