// A regular expression (attn_structured.regex, a schema's pattern): it
// converts or is refused; what converts is GBNF that compiles, in both the
// whole-text and the JSON-string form, and runs through the matcher.
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "model/grammar/regex.h"
#include "tests/fuzz/grammar_fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string pattern(reinterpret_cast<const char*>(data), size);
  for (bool json : {false, true}) {
    attn::grammar::RegexOptions options;
    options.search = options.json_string = json;
    auto body = attn::grammar::RegexToGbnf(pattern, options);
    if (!body.ok()) continue;
    auto grammar = attn::grammar::Grammar::FromGbnf(absl::StrCat("root ::= ", *body, "\n"));
    if (!grammar.ok() && grammar.status().message().find("above") == std::string::npos &&
        grammar.status().message().find("more than") == std::string::npos &&
        grammar.status().message().find("nested deeper") == std::string::npos) {
      __builtin_trap();
    }
    if (grammar.ok()) attn::grammar::RunMatcher(*grammar, pattern);
  }
  return 0;
}
