// CUDA graphs of CausalLm's decode step, one per bucket of batch sizes.
//
// A decode step of a model on a GPU is a few hundred kernel launches, each a
// few microseconds of CPU time, and at small batches the GPU waits on the
// CPU between them. Captured once per bucket (1, 2, 4, then multiples of 8
// up to kMaxBatch), a step is one graph launch: the tokens and rows are
// copied into the graph's fixed input buffers, the graph runs every layer's
// kernels on the addresses it was captured with, and the logits come out of
// its fixed output. A batch between buckets is padded with spare rows of
// the pool (kSpareRows of them, after the rows the engine sees), whose
// states no one reads.
//
// Only a step that never waits for the GPU can be captured
// (CausalLm::StepChecked, model/mixers/step_rows.h), so graphs serve models
// whose every layer is a recurrence, or AFT or attention when the fused
// step kernels run (Unavailable() says why not otherwise). With the
// kernels a mixture of experts is captured too, for buckets whose rows
// make at most cuda::kMaxExpertChoices choices of experts
// (LargestBucket); larger batches step eagerly. A model bounded by a
// max_context (attention's cache, aft-local's and aft-full's bias tables,
// learned positions) has its rows' lengths checked before each replay, one
// small read from the device; spare rows run on past it, which the kernels
// and lookups tolerate.
// A bucket's first batch runs eagerly, which also sets up what the step
// initialises lazily (cuBLAS handles, kernels' modules); its second is
// captured and replayed. If a capture fails, every step of this model runs
// eagerly from then on, and failure() says why. ATTN_CUDA_GRAPHS=0 in the
// environment turns graphs off, to compare the two on one machine.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/lm/language_model.h"

namespace attn {

// One captured step. Replay() runs it again on its input buffers' current
// values and writes logits(), the same tensor every time.
class CapturedStep {
 public:
  virtual ~CapturedStep() = default;
  virtual void Replay() = 0;
  virtual const torch::Tensor& logits() const = 0;
};

// Captures `step` (which returns its logits), sharing memory with `share`
// (a step this capturer made, or null); null with *error set if it cannot.
using StepCapturer = std::function<std::unique_ptr<CapturedStep>(
    const std::function<torch::Tensor()>& step, CapturedStep* share, std::string* error)>;

// CUDA graphs on `device`, capturing only the calling thread's work (with
// several models served, the other engines' threads go on); in a build
// without them, a capturer that fails saying so.
StepCapturer CudaGraphCapturer(torch::Device device);

class StepGraphs {
 public:
  static constexpr int64_t kSpareRows = 7;  // the most padding a bucket needs
  static constexpr int64_t kMaxBatch = 1024;

  // The bucket a batch of `batch` rows steps in: 1, 2, 4, then the next
  // multiple of 8; 0 past kMaxBatch (the step runs eagerly).
  static int64_t BucketFor(int64_t batch);
  // Why graphs cannot serve `model` on `device`; empty when they can.
  static std::string Unavailable(const CausalLm& model, torch::Device device);

  // `model` on `device`, where Unavailable() is empty; its state pool has
  // `rows` rows the engine uses followed by kSpareRows spare ones. `capture`
  // (default: CudaGraphCapturer) makes the graphs; tests pass one that
  // reruns the step, to check on the CPU that a replay follows its buffers.
  StepGraphs(CausalLm model, torch::Device device, int64_t rows, StepCapturer capture = {});
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // CausalLm::step(tokens, rows, state) for host `tokens` and `rows` [B]
  // through the graph of B's bucket; nullopt where the caller should step
  // eagerly instead (the bucket's first batch, a batch past the model's
  // LargestBucket, graphs given up). Throws c10::Error for tokens or rows
  // the model's step would refuse, before anything runs.
  std::optional<torch::Tensor> Step(const torch::Tensor& tokens, const torch::Tensor& rows,
                                    LmState& state);
  // Why capturing failed, after which every step runs eagerly; empty if not.
  const std::string& failure() const;
  // How many buckets have a graph.
  int64_t graphs() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

namespace step_graphs_internal {

// Whether this build captures graphs (a GPU build; model/backend's
// step_graphs_cuda.cc, else step_graphs_absent.cc).
bool GraphsBuilt();

// Why a model of `config` has a step that reads device values on the host
// (and so cannot be captured); empty when it has none. `kernels`: whether
// the fused CUDA step kernels run (model/cuda/state_kernels.h), which read
// AFT's and attention's lengths on the device where their op-by-op steps
// read them on the host.
std::string WhyNotCapturable(const LmConfig& config, bool kernels);

// The largest bucket graphs serve for a model of `config`: kMaxBatch, or
// for a mixture of experts the largest whose rows' choices the experts'
// kernel takes in one call (cuda::kMaxExpertChoices).
int64_t LargestBucket(const LmConfig& config);

// Throws c10::Error unless every row of `rows` (host ids) of `state` can
// take one more token under `limit` tokens (-1: unbounded). Reads the
// rows' lengths from the device: a replay runs no layer's own check.
void CheckRoom(const LmState& state, const torch::Tensor& rows, int64_t limit);

// A step's host tokens and rows padded to `bucket` entries: padding tokens
// are 0, padding rows the spares from `first_spare` on.
struct PaddedStep {
  torch::Tensor tokens, rows;  // CPU int64 [bucket]
};
PaddedStep PadStep(const torch::Tensor& tokens, const torch::Tensor& rows, int64_t bucket,
                   int64_t first_spare);

// The data pointers of every tensor of `state`: a graph replays on the
// addresses it was captured with, so a pool reallocated since (its rows
// grown, say) needs new graphs.
std::vector<const void*> StateAddresses(const LmState& state);
// StateAddresses(state) == addresses, without building the vector: every
// replay checks it.
bool StateAt(const LmState& state, const std::vector<const void*>& addresses);

}  // namespace step_graphs_internal
}  // namespace attn
