// RwkvVocabulary::Parse on arbitrary text (an rwkv_vocab_v20230424.txt from
// a download): lines, Python literals, ids. A vocabulary that parses must
// encode any text into ids whose bytes give the text back.
#include <cstdint>
#include <string>

#include "model/text/rwkv_vocabulary.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  auto vocab = attn::RwkvVocabulary::Parse(input);
  if (!vocab.ok()) return 0;
  const absl::string_view text = input.substr(0, 64);
  std::string back;
  for (int64_t id : vocab->Encode(text)) {
    if (id < 1 || id >= vocab->size()) __builtin_trap();
    back += vocab->TokenBytes(id);
  }
  if (back != text) __builtin_trap();
  return 0;
}
