// attn-render-template: a chat template rendered by this project's Jinja
// interpreter (model/jinja/template.h), for comparison with Jinja2
// (tests/text/chat_templates_agree.sh).
//
//   attn-render-template TEMPLATE CASES   CASES: one JSON object of template variables
//                                         per line; prints one JSON line per case,
//                                         {"text": "..."} or {"error": "..."}
//   attn-render-template --snippets FILE  FILE: {"template", "vars"} per line; prints
//                                         the same per line
// strftime_now() reads a fixed clock, 2025-01-15 08:30:00, so that renders
// that print the date compare.
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "model/jinja/template.h"
#include "nlohmann/json.hpp"

namespace {

std::string FixedTime(const std::string& format) {
  std::tm t{};
  t.tm_year = 2025 - 1900;
  t.tm_mon = 0;
  t.tm_mday = 15;
  t.tm_hour = 8;
  t.tm_min = 30;
  t.tm_wday = 3;  // a Wednesday
  t.tm_yday = 14;
  char buf[256];
  size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &t);
  return std::string(buf, n);
}

}  // namespace

void Print(const absl::StatusOr<std::string>& text) {
  nlohmann::ordered_json out;
  if (text.ok()) {
    out["text"] = *text;
  } else {
    out["error"] = std::string(text.status().message());
  }
  std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

int Snippets(const char* path, const attn::jinja::RenderOptions& options) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto snippet = nlohmann::ordered_json::parse(line);
    auto tmpl = attn::jinja::Template::Parse(snippet["template"].get<std::string>());
    if (!tmpl.ok()) {
      Print(tmpl.status());
      continue;
    }
    Print(tmpl->Render(snippet["vars"], options));
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: attn-render-template TEMPLATE CASES | --snippets FILE\n";
    return 2;
  }
  attn::jinja::RenderOptions options;
  options.strftime_now = FixedTime;
  if (std::string(argv[1]) == "--snippets") return Snippets(argv[2], options);
  std::ifstream in(argv[1], std::ios::binary);
  std::stringstream source;
  source << in.rdbuf();
  auto tmpl = attn::jinja::Template::Parse(source.str());
  if (!tmpl.ok()) {
    std::cerr << argv[1] << ": " << tmpl.status().message() << "\n";
    return 1;
  }
  std::ifstream cases(argv[2]);
  std::string line;
  while (std::getline(cases, line))
    Print(tmpl->Render(nlohmann::ordered_json::parse(line), options));
  return 0;
}
