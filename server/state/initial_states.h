// Named initial states of a model ("state tuning": RWKV users tune the state
// a sequence starts from instead of the weights). attn-server loads them
// with --initial_states=MODEL:NAME=FILE,...; a request names one
// (GenerateRequest.initial_state) and its sequence starts from it instead of
// the empty sequence. Each has its own origin in the state cache
// (StateCache::Lookup), so that sequences from different initial states
// never share cached states.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace attn {
struct SavedRow;  // model/backend/backend.h
class LmBackend;
}  // namespace attn

namespace attn::serving {

struct InitialState {
  std::shared_ptr<const SavedRow> row;  // the sequence's state, 0 tokens in
  uint64_t origin = 0;                  // its state cache origin
};
using InitialStates = std::map<std::string, InitialState>;  // by name

// --initial_states: model -> name -> file. kInvalidArgument naming the flag
// and the entry that is not MODEL:NAME=FILE, or a name given twice.
absl::Status ParseInitialStatesFlag(const std::string& flag,
                                    std::map<std::string, std::map<std::string, std::string>>* out);

// Loads `files` (name -> .pth holding blocks.N.att.time_state [H, N, N] per
// layer, as RWKV state tuning writes them) for `model` running on `backend`.
// Only the native backend of an rwkv7 model has such states:
// kInvalidArgument naming the model otherwise, and naming the file and
// tensor when a state does not fit the model.
absl::StatusOr<InitialStates> LoadInitialStates(const std::string& model, LmBackend& backend,
                                                const std::map<std::string, std::string>& files);

}  // namespace attn::serving
