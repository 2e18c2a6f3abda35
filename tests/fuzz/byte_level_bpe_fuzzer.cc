// ByteLevelBpe::Parse on arbitrary text (a tokenizer.json from a download):
// the JSON, its components, vocabulary, merges and added tokens, and the
// regexes it compiles. A tokenizer that parses must encode any bytes into
// ids it has, and decode every one of them.
#include <cstdint>
#include <string>

#include "model/text/byte_level_bpe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  auto bpe = attn::ByteLevelBpe::Parse(input);
  if (!bpe.ok()) return 0;
  for (absl::string_view text : {input.substr(0, 96), absl::string_view("a  b\n\xff\xe4\xb8")}) {
    for (int64_t id : bpe->Encode(text)) {
      if (id < 0 || id >= bpe->size()) __builtin_trap();
      (void)bpe->TokenBytes(id);
    }
  }
  return 0;
}
