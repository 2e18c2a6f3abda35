// A client's GBNF grammar (attn_structured.grammar): it compiles or is
// refused with an error, and what compiles runs through the matcher.
#include <cstdint>
#include <string>

#include "model/grammar/grammar.h"
#include "tests/fuzz/grammar_fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  attn::grammar::GrammarLimits limits;
  limits.max_elements = 20000;
  auto grammar = attn::grammar::Grammar::FromGbnf(text, limits);
  if (!grammar.ok()) return 0;
  attn::grammar::RunMatcher(*grammar, text);
  return 0;
}
