// Pools of per-sequence state rows whose memory grows with use. Internal to
// model/.
//
// A server allocates a state of N rows (--max_active) before its first
// request. On the CPU a pool is an anonymous mapping of zero pages that the
// system backs with memory only when a row is first written, so a pool of N
// rows costs what its rows in use hold, not N times a sequence's state
// (granite-4.0-h-1b holds 57 MB per sequence: 256 rows allocated eagerly
// would need 14.6 GB). A row's pages go back to the system when its
// sequence ends (a server's RowPool keeps the last ended row's until
// another ends: model/backend/row_pool.h) and read as zeros again. The
// key/value caches (kv_cache.h) and the recurrent states whose empty row
// is zeros (Mamba-2, short convolution, linear attention, RWKV-7) are
// pooled this way; other devices, and states whose empty row is not zeros
// (AFT's running maximum), are plain tensors.
#pragma once

#include <torch/types.h>

#include <vector>

#include "model/mixers/mixer.h"

namespace attn {

// A float tensor of `shape` on the CPU whose memory is an anonymous private
// mapping: it reads as zeros, and a page is backed by memory from its first
// write (MAP_NORESERVE: no swap is reserved for the untouched rest).
torch::Tensor LazyZeros(const std::vector<int64_t>& shape);

// Whether `tensor`'s memory is a LazyZeros mapping (a view of one counts).
bool IsLazyZeros(const torch::Tensor& tensor);

// mixer.initial_state(rows, device), except that on the CPU a state whose
// empty row is all float zeros is LazyZeros. That is decided here, once per
// pool: ReleasePooledRows relies on it.
MixerState MakeStatePool(const SequenceMixer& mixer, int64_t rows, torch::Device device);

// Resets rows `slots` of a state whose every tensor is a whole contiguous
// LazyZeros pool (MakeStatePool's, so its empty row is zeros): gives their
// pages back (ReleaseRowPages) and zeroes their lengths. False, having done
// nothing, for any other state.
bool ReleasePooledRows(MixerState& state, const torch::Tensor& slots);

// Returns the memory of rows `slots` (int64, any device) of every tensor of
// `state` (contiguous float, rows first) to the system; they read as zeros
// afterwards. Lengths are left to the caller. A no-op off the CPU.
void ReleaseRowPages(MixerState& state, const torch::Tensor& slots);

// Bytes of `tensor` (a CPU tensor) that the system holds in memory now, by
// mincore(2). For tests and diagnostics.
int64_t ResidentBytes(const torch::Tensor& tensor);

}  // namespace attn
