// TokenizerJson::Parse on arbitrary text (a tokenizer.json from a
// download): the JSON, its normalizer, pre-tokenizer, decoder and
// post-processor, vocabulary, merges and added tokens, and the regexes it
// compiles. A tokenizer that parses must encode any bytes, with and without
// special tokens, into ids it has, and decode every one of them.
#include <cstdint>
#include <string>

#include "model/text/tokenizer_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  auto tokenizer = attn::TokenizerJson::Parse(input);
  if (!tokenizer.ok()) return 0;
  for (absl::string_view text : {input.substr(0, 96), absl::string_view("a  b\n\xff\xe4\xb8")}) {
    for (bool special : {false, true}) {
      for (int64_t id : tokenizer->Encode(text, special)) {
        if (id < 0 || id >= tokenizer->size()) __builtin_trap();
        (void)tokenizer->TokenBytes(id);
      }
    }
  }
  return 0;
}
