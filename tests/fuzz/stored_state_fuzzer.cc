// The shared state tier's parsers on arbitrary bytes: DecodeStoredState and
// VerifyStoredState (an entry read from Redis, which anyone who can write
// to it may have written) and ParseRedisUrl (--state_store). The input is
// also wrapped as a well-formed entry around arbitrary tokens and blob
// bytes, so that the fuzzer reaches the checks behind the checksum: such an
// entry must decode to what was encoded, and verify against its own tokens
// exactly when its blob decodes with the same fingerprint and token count.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "server/state/redis_connection.h"
#include "server/state/state_blob.h"
#include "server/state/stored_state.h"

namespace {

using attn::serving::DecodeStoredState;
using attn::serving::VerifyStoredState;

void CheckWrapped(const std::string& input) {
  if (input.size() < 9) return;
  uint64_t origin = 0;
  std::memcpy(&origin, input.data(), sizeof(origin));
  const size_t count = static_cast<uint8_t>(input[8]) % 32;
  std::vector<int64_t> tokens;
  size_t at = 9;
  for (; tokens.size() < count && at + 2 <= input.size(); at += 2) {
    tokens.push_back(static_cast<uint8_t>(input[at]) | static_cast<uint8_t>(input[at + 1]) << 8);
  }
  const std::string blob = input.substr(at);
  const std::string entry = attn::serving::EncodeStoredState(origin, tokens, blob);
  auto decoded = DecodeStoredState(entry);
  if (!decoded.ok() || decoded->origin != origin || decoded->tokens != tokens ||
      decoded->blob != blob) {
    __builtin_trap();
  }
  auto inner = attn::serving::DecodeStateBlob(blob);
  const std::string fingerprint = inner.ok() ? inner->fingerprint : "model-0";
  auto verified = VerifyStoredState(entry, origin, tokens, fingerprint);
  const bool should = inner.ok() && inner->tokens == static_cast<int64_t>(tokens.size());
  if (verified.ok() != should) __builtin_trap();
  // Another origin never verifies.
  if (VerifyStoredState(entry, origin + 1, tokens, fingerprint).ok()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  if (auto stored = DecodeStoredState(input); stored.ok()) {
    VerifyStoredState(input, stored->origin, stored->tokens, "model-0").IgnoreError();
  }
  attn::serving::ParseRedisUrl(input).IgnoreError();
  CheckWrapped(input);
  return 0;
}
