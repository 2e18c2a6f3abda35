// The tokenizer's encode and incremental decode on arbitrary bytes (a bytes
// tokenizer: SentencePiece is a plugin the sanitizers cannot load, see
// docs/reliability.md). Encoding then decoding gives valid UTF-8 back, and
// pushing ids one at a time gives exactly what Decode gives for all of
// them, whatever the ids (any split of multi-byte characters, ids past the
// bytes).
#include <cstdint>
#include <string>
#include <vector>

#include "model/text/tokenizer.h"
#include "util/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto* tokenizer = new attn::Tokenizer(*attn::Tokenizer::Bytes(300, 256));
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::vector<int64_t> ids = tokenizer->Encode(text);
  // Valid UTF-8 comes back unchanged (bytes that are not become U+FFFD).
  if (attn::IsValidUtf8(text) && tokenizer->Decode(ids) != text) __builtin_trap();
  // The input's bytes, taken in pairs, as ids anywhere in the vocabulary.
  std::vector<int64_t> any;
  for (size_t i = 0; i + 1 < size; i += 2) any.push_back((data[i] << 8 | data[i + 1]) % 300);
  attn::IncrementalDecoder decoder(*tokenizer);
  std::string pieces;
  for (int64_t id : any) pieces += decoder.Push(id);
  pieces += decoder.Finish();
  if (pieces != tokenizer->Decode(any)) __builtin_trap();
  return 0;
}
