// A state as the shared store keeps it (server/state/state_store.h): the
// exact tokens it covers after its origin, so that a reader can check that
// an entry found by hash is the prefix it wants, then the StateBlob
// (server/state/state_blob.h) with the model's fingerprint and the state itself.
//
// Layout, little-endian:
//   "ATSS"                  magic
//   u32 version             kStoredStateVersion
//   u64 origin              where the tokens start (kEmptySequenceOrigin
//                           or an initial state's origin)
//   u32 count, i32 tokens[count]
//   u64 checksum            Hash64 of every byte before it
//   the StateBlob's bytes   (its own checksum covers them)
//
// Anyone who can write to the store can write an entry, so decoding bounds
// every size by the bytes present, and a reader uses an entry only when its
// origin, tokens, fingerprint and token count all match what it asked for
// (VerifyStoredState); otherwise it is a miss.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "server/state/state_blob.h"

namespace attn::serving {

inline constexpr uint32_t kStoredStateVersion = 1;

struct StoredState {
  uint64_t origin = 0;
  std::vector<int64_t> tokens;
  std::string blob;  // the StateBlob's bytes, not yet decoded
};

// The bytes of the state after `tokens` from `origin`, whose StateBlob
// bytes are `blob`. Token ids must fit 32 bits (every vocabulary does).
std::string EncodeStoredState(uint64_t origin, absl::Span<const int64_t> tokens,
                              absl::string_view blob);

// kDataLoss saying what is wrong for bytes that are not a stored state (or
// of another version); the blob is returned undecoded.
absl::StatusOr<StoredState> DecodeStoredState(absl::string_view bytes);

// Decodes `bytes` and checks it is the state after exactly `tokens` from
// `origin` of the model `fingerprint`: kDataLoss naming the first mismatch
// otherwise. Returns the decoded blob.
absl::StatusOr<StateBlob> VerifyStoredState(absl::string_view bytes, uint64_t origin,
                                            absl::Span<const int64_t> tokens,
                                            const std::string& fingerprint);

}  // namespace attn::serving
