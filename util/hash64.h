// A 64-bit hash of bytes, stable across processes, machines and versions
// of this server: state blobs and stored states carry it as their checksum,
// and a model's fingerprint (shared by replicas through the Redis tier) is
// the hash of its file. Changing it invalidates every stored state.
#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"

namespace attn {

uint64_t Hash64(absl::string_view bytes, uint64_t seed = 0);

}  // namespace attn
