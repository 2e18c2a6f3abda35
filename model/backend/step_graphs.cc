#include "model/backend/step_graphs.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/cuda/state_kernels.h"

namespace attn {

int64_t StepGraphs::BucketFor(int64_t batch) {
  if (batch <= 0 || batch > kMaxBatch) return 0;
  if (batch <= 4) return batch == 3 ? 4 : batch;
  return (batch + 7) / 8 * 8;
}

std::string StepGraphs::Unavailable(const CausalLm& model, torch::Device device) {
  if (!step_graphs_internal::GraphsBuilt()) {
    return "this build has no CUDA graphs (a GPU build: -DATTN_CUDA_KERNELS=ON)";
  }
  if (!device.is_cuda()) return "the model is not on a GPU";
  if (const char* off = std::getenv("ATTN_CUDA_GRAPHS");
      off != nullptr && std::string(off) == "0") {
    return "ATTN_CUDA_GRAPHS=0";
  }
  return step_graphs_internal::WhyNotCapturable(model->config(), cuda::KernelsEnabled());
}

struct StepGraphs::Impl {
  Impl(CausalLm model, torch::Device device, int64_t rows, StepCapturer capture)
      : model(std::move(model)),
        device(device),
        rows(rows),
        largest_bucket(step_graphs_internal::LargestBucket(this->model->config())),
        capture(std::move(capture)) {
    const auto options = torch::TensorOptions(torch::kLong).device(device);
    tokens_in = torch::zeros({kMaxBatch}, options);
    rows_in = torch::zeros({kMaxBatch}, options);
  }
  bool Capture(int64_t bucket, LmState& state);

  CausalLm model;
  torch::Device device;
  int64_t rows;
  int64_t largest_bucket;
  StepCapturer capture;
  torch::Tensor tokens_in, rows_in;  // int64 [kMaxBatch] on the device
  std::map<int64_t, std::unique_ptr<CapturedStep>> graphs;
  std::set<int64_t> warmed;  // buckets that have run eagerly once
  std::vector<const void*> addresses;
  std::string failure;
};

StepGraphs::StepGraphs(CausalLm model, torch::Device device, int64_t rows, StepCapturer capture)
    : impl_(std::make_unique<Impl>(std::move(model), device, rows,
                                   capture ? std::move(capture) : CudaGraphCapturer(device))) {}

StepGraphs::~StepGraphs() = default;

bool StepGraphs::Impl::Capture(int64_t bucket, LmState& state) {
  torch::NoGradGuard no_grad;
  std::string error;
  // Memory is shared between the buckets' graphs, which never run at once.
  CapturedStep* share = graphs.empty() ? nullptr : graphs.begin()->second.get();
  std::unique_ptr<CapturedStep> captured = capture(
      [this, bucket, &state] {
        // The host ids only satisfy the layers' checks: the step indexes
        // rows with the device copy, which each replay fills.
        // Step() checks the rows' room before each replay.
        const StepRows step_rows(torch::arange(bucket, torch::kLong), rows_in.narrow(0, 0, bucket),
                                 StepRows::Capacity::kCallerChecked);
        return model->StepChecked(tokens_in.narrow(0, 0, bucket), step_rows, state);
      },
      share, &error);
  if (captured == nullptr) {
    failure = absl::StrCat("capturing a step of ", bucket, " rows: ", error);
    std::fprintf(stderr, "warning: CUDA graphs off for this model, its steps run eagerly: %s\n",
                 failure.c_str());
    graphs.clear();
    return false;
  }
  graphs[bucket] = std::move(captured);
  return true;
}

std::optional<torch::Tensor> StepGraphs::Step(const torch::Tensor& tokens,
                                              const torch::Tensor& rows, LmState& state) {
  Impl& g = *impl_;
  const int64_t batch = tokens.dim() == 1 ? tokens.size(0) : 0;
  const int64_t bucket = BucketFor(batch);
  if (!g.failure.empty() || bucket == 0 || bucket > g.largest_bucket) return std::nullopt;
  // The model's own checks, which a replay skips: the engine's rows only,
  // never a spare.
  const torch::Tensor host_tokens = tokens.to(torch::kCPU);
  g.model->CheckTokens(host_tokens);
  const torch::Tensor host_rows = CheckSlots(g.rows, rows, batch);
  step_graphs_internal::CheckRoom(state, host_rows, g.model->max_context());
  if (!step_graphs_internal::StateAt(state, g.addresses)) {
    g.graphs.clear();  // captured on a pool since reallocated
    g.warmed.clear();
    g.addresses = step_graphs_internal::StateAddresses(state);
  }
  if (g.warmed.insert(bucket).second) return std::nullopt;
  auto captured = g.graphs.find(bucket);
  if (captured == g.graphs.end()) {
    if (!g.Capture(bucket, state)) return std::nullopt;
    captured = g.graphs.find(bucket);
  }
  const step_graphs_internal::PaddedStep padded =
      step_graphs_internal::PadStep(host_tokens, host_rows, bucket, g.rows);
  CopyFromHost(g.tokens_in.narrow(0, 0, bucket), padded.tokens);
  CopyFromHost(g.rows_in.narrow(0, 0, bucket), padded.rows);
  captured->second->Replay();
  // A copy: the graph's output is overwritten by its next replay.
  return captured->second->logits().narrow(0, 0, batch).clone();
}

const std::string& StepGraphs::failure() const { return impl_->failure; }

int64_t StepGraphs::graphs() const { return static_cast<int64_t>(impl_->graphs.size()); }

namespace step_graphs_internal {

std::string WhyNotCapturable(const LmConfig& config, bool kernels) {
  // Positions are computed or looked up on the device from the rows'
  // lengths; CheckRoom keeps learned ones within their table.
  if (config.moe.experts > 0 && !kernels) {
    return "a mixture of experts without the fused CUDA kernels routes its rows on the host";
  }
  // Recurrences and aft-decay: their steps read no length on the host.
  // AFT's other kinds and attention size their work by the rows' lengths
  // in their op-by-op steps; their CUDA kernels read them on the device.
  constexpr MixerKind kRecurrent[] = {
      MixerKind::kLinearElu, MixerKind::kLinearExp, MixerKind::kLinearDecay, MixerKind::kAftDecay,
      MixerKind::kRwkv7,     MixerKind::kRwkv4,     MixerKind::kMamba2,      MixerKind::kShortConv};
  constexpr MixerKind kByKernel[] = {
      MixerKind::kAftFull, MixerKind::kAftLocal, MixerKind::kAftSimple, MixerKind::kAftConv,
      MixerKind::kMha,     MixerKind::kMhaAlibi, MixerKind::kRelative,  MixerKind::kGqa};
  const auto among = [](const auto& kinds, MixerKind kind) {
    return std::find(std::begin(kinds), std::end(kinds), kind) != std::end(kinds);
  };
  for (int64_t l = 0; l < config.layers; ++l) {
    const MixerKind kind = config.layer_mixer(l);
    if (among(kRecurrent, kind) || (kernels && among(kByKernel, kind))) continue;
    return absl::StrCat(
        "layer ", l, " is ", MixerKindName(kind),
        among(kByKernel, kind) ? ", whose step without the fused CUDA kernels" : ", whose step",
        " sizes its work by the rows' lengths on the host");
  }
  return "";
}

int64_t LargestBucket(const LmConfig& config) {
  if (config.moe.experts == 0) return StepGraphs::kMaxBatch;
  // The experts' kernel serves at most kMaxExpertChoices choices a call.
  const int64_t rows = std::min(StepGraphs::kMaxBatch, cuda::kMaxExpertChoices / config.moe.top_k);
  if (rows >= 8) return rows / 8 * 8;
  return rows >= 4 ? 4 : (rows >= 2 ? 2 : rows);
}

void CheckRoom(const LmState& state, const torch::Tensor& rows, int64_t limit) {
  if (limit < 0 || state.layers.empty()) return;
  // Every layer's lengths advance together: the first layer's are all's.
  const torch::Tensor lengths = state.layers.front().length.to(torch::kCPU).contiguous();
  const int64_t* length = lengths.data_ptr<int64_t>();
  const int64_t* row = rows.data_ptr<int64_t>();
  for (int64_t b = 0; b < rows.size(0); ++b) {
    TORCH_CHECK(length[row[b]] < limit, "the model holds at most ", limit,
                " tokens per sequence; the sequence in row ", row[b], ", at ", length[row[b]],
                ", cannot take another");
  }
}

PaddedStep PadStep(const torch::Tensor& tokens, const torch::Tensor& rows, int64_t bucket,
                   int64_t first_spare) {
  const int64_t batch = tokens.size(0);
  TORCH_CHECK(batch <= bucket && bucket - batch <= StepGraphs::kSpareRows, "a batch of ", batch,
              " does not pad to ", bucket);
  PaddedStep padded{torch::zeros({bucket}, torch::kLong),
                    torch::arange(first_spare - batch, first_spare - batch + bucket, torch::kLong)};
  padded.tokens.narrow(0, 0, batch).copy_(tokens);
  padded.rows.narrow(0, 0, batch).copy_(rows);
  return padded;
}

std::vector<const void*> StateAddresses(const LmState& state) {
  std::vector<const void*> addresses;
  for (const MixerState& layer : state.layers) {
    addresses.push_back(layer.length.data_ptr());
    for (const torch::Tensor& t : layer.tensors) addresses.push_back(t.data_ptr());
  }
  return addresses;
}

bool StateAt(const LmState& state, const std::vector<const void*>& addresses) {
  size_t i = 0;
  const auto next = [&](const torch::Tensor& t) {
    return i < addresses.size() && addresses[i++] == t.data_ptr();
  };
  for (const MixerState& layer : state.layers) {
    if (!next(layer.length)) return false;
    for (const torch::Tensor& t : layer.tensors) {
      if (!next(t)) return false;
    }
  }
  return i == addresses.size();
}

}  // namespace step_graphs_internal
}  // namespace attn
