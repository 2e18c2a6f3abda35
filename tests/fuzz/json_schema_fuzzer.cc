// A JSON Schema from a request (response_format): it compiles or is
// refused naming a keyword; a schema that compiles to GBNF always makes a
// grammar (the GBNF writer and parser agree), which runs through the matcher.
#include <cstdint>
#include <string>

#include "model/grammar/constraint.h"
#include "tests/fuzz/grammar_fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto schema = nlohmann::ordered_json::parse(text, nullptr, false);
  if (schema.is_discarded()) return 0;
  auto gbnf = attn::grammar::ConstraintGbnf(attn::grammar::OutputConstraint::JsonSchema(schema));
  if (!gbnf.ok()) return 0;
  auto grammar = attn::grammar::Grammar::FromGbnf(*gbnf);
  // Only a limit may refuse what the schema compiler wrote.
  if (!grammar.ok() && grammar.status().message().find("more than") == std::string::npos &&
      grammar.status().message().find("above") == std::string::npos) {
    __builtin_trap();
  }
  if (grammar.ok()) attn::grammar::RunMatcher(*grammar, text);
  return 0;
}
