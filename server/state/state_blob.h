// StateBlob: a sequence's state as bytes a client holds
// (GenerateResponse.state) and sends back to continue it
// (GenerateRequest.state), on this server or any replica serving the same
// model file.
//
// Layout, little-endian:
//   "ATSB"                       magic
//   u32 version                  kStateBlobVersion
//   u32 n, n bytes               the model's fingerprint (ModelFingerprint)
//   i64 tokens                   tokens the state covers
//   u32 count                    tensors, then for each:
//     u8 dtype, u8 rank, i64 sizes[rank], the elements (row-major)
//   u64 checksum                 Hash64 of every byte before it
// The checksum catches truncation and corruption; it is no signature: a
// client can forge a blob, so decoding bounds every size by the bytes
// present, and the backend checks each tensor's shape against the model's
// state before using it (LmBackend::LoadRow). Forged values can only make
// that client's own output wrong.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "util/hash64.h"

namespace attn {
struct SavedRow;  // model/backend/backend.h
}  // namespace attn

namespace attn::serving {

inline constexpr uint32_t kStateBlobVersion = 1;

struct StateBlob {
  std::string fingerprint;
  int64_t tokens = 0;
  std::shared_ptr<const SavedRow> row;  // never null
};

// The bytes of `blob` (its tensors are copied to the CPU).
std::string EncodeStateBlob(const StateBlob& blob);
// kInvalidArgument saying what is wrong ("state: truncated at byte 812 of
// 900") for bytes that are not a blob, kFailedPrecondition for a blob of
// another format version.
absl::StatusOr<StateBlob> DecodeStateBlob(absl::string_view bytes);

// "<mixer>-<16 hex digits>": the mixer's name and the Hash64 of the model
// file (its configuration, weights and tokenizer) that its loader computed
// from the bytes it read. Replicas serving the same file agree on it; any
// other model or version differs.
std::string ModelFingerprint(const std::string& mixer, uint64_t file_hash);

}  // namespace attn::serving
