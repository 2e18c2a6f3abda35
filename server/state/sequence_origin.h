// Where a sequence starts before its tokens, as the state cache keys it:
// the empty sequence, or a named initial state (--initial_states). Kept
// apart from state_cache.h so that the request types (server/engine/engine.h)
// name it without the model's headers.
#pragma once

#include <cstdint>

namespace attn::serving {

// The origin of sequences that start from the empty state; a named initial
// state has its own (a hash of its file, server/state/initial_states.h).
inline constexpr uint64_t kEmptySequenceOrigin = 0x6a09e667f3bcc908ULL;

}  // namespace attn::serving
