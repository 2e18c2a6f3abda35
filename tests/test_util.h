// Helpers shared by the model tests.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "model/mixers/aft.h"
#include "model/mixers/mixer.h"
#include "model/mixers/whole_block.h"
#include "tests/test_corpus.h"

namespace attn::testing {

// Small but non-trivial sizes: several heads, a window shorter than the
// sequences, chunks that do not divide them.
inline MixerOptions SmallOptions(MixerKind kind) {
  MixerOptions o;
  o.kind = kind;
  o.d_model = 32;
  o.heads = 4;
  o.max_context = 256;
  o.window = 8;
  o.chunk = 16;
  o.mem_len = 64;
  o.kv_heads = 2;  // gqa: two query heads per key/value head
  o.qk_norm = true;
  return o;
}

// Gives every position parameter (AFT bias, XL u and v) random values, so a
// test cannot pass because they sit at their zero initialisation. Inside a
// whole block (RWKV-7, whose output projections start at zero) the matrices
// get random values at their fan-in's scale, the other parameters `stddev`;
// elsewhere the `proj` projections keep theirs.
inline void RandomizePositionParameters(torch::nn::Module& module, double stddev = 0.5) {
  torch::NoGradGuard no_grad;
  std::set<const void*> in_blocks;
  auto randomize_block = [&](torch::nn::Module& block) {
    for (auto& p : block.parameters()) {
      in_blocks.insert(p.unsafeGetTensorImpl());
      if (p.dim() == 2) {
        p.normal_(0.0, 1.0 / std::sqrt(static_cast<double>(p.size(1))));
      } else {
        p.normal_(0.0, stddev);
      }
    }
  };
  for (auto& child : module.modules()) {  // the module itself included
    auto* block = dynamic_cast<WholeBlockMixer*>(child.get());
    if (block != nullptr) randomize_block(*block);
  }
  for (auto& p : module.named_parameters()) {
    if (in_blocks.count(p.value().unsafeGetTensorImpl())) continue;
    if (p.key().find("proj") == std::string::npos) p.value().normal_(0.0, stddev);
  }
}

// A gtest-safe name for a mixer kind: "aft-conv" -> "aft_conv".
inline std::string TestName(MixerKind kind) {
  std::string name = MixerKindName(kind);
  for (auto& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

// For INSTANTIATE_TEST_SUITE_P over MixerKind values.
template <typename Info>
std::string KindTestName(const Info& info) {
  return TestName(info.param);
}

// max |a - b| / max |b|, in float64.
inline double RelativeError(const torch::Tensor& a, const torch::Tensor& b) {
  const auto bd = b.to(torch::kDouble);
  return (a.to(torch::kDouble) - bd).abs().max().item<double>() / bd.abs().max().item<double>();
}

inline double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// The values of an integer tensor, to compare with EXPECT_EQ.
inline std::vector<int64_t> Int64s(const torch::Tensor& t) {
  const torch::Tensor ids = t.to(torch::kCPU, torch::kLong).contiguous();
  return {ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel()};
}

// A deep copy of a state (its length and every tensor).
inline MixerState CopyState(const MixerState& state) {
  MixerState copy;
  copy.length = state.length.clone();
  for (const torch::Tensor& t : state.tensors) copy.tensors.push_back(t.clone());
  return copy;
}

// The largest difference between two states' tensors, in float64; infinity
// when their lengths or shapes differ.
inline double StateDifference(const MixerState& a, const MixerState& b) {
  if (!torch::equal(a.length, b.length) || a.tensors.size() != b.tensors.size()) return INFINITY;
  double most = 0.0;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    if (a.tensors[i].sizes() != b.tensors[i].sizes()) return INFINITY;
    if (a.tensors[i].numel() > 0) most = std::max(most, MaxAbsDiff(a.tensors[i], b.tensors[i]));
  }
  return most;
}

// x [B, T, D] through a mixer's recurrent forms on rows `slots` of `state`:
// prefill chunks of the given sizes, each continuing the state the one
// before left, then one step per remaining token. Returns [B, T, D].
inline torch::Tensor PrefillChunksThenStep(SequenceMixer& mixer, const torch::Tensor& x,
                                           MixerState& state, const torch::Tensor& slots,
                                           std::initializer_list<int64_t> chunk_sizes) {
  std::vector<torch::Tensor> outputs;
  int64_t t = 0;
  for (int64_t chunk : chunk_sizes) {
    outputs.push_back(mixer.prefill(x.narrow(1, t, chunk), state, slots));
    t += chunk;
  }
  for (; t < x.size(1); ++t)
    outputs.push_back(mixer.step(x.select(1, t), state, slots).unsqueeze(1));
  return torch::cat(outputs, 1);
}

// w_{t,t'} of an AFT module as a dense [G, T, T] tensor, built from the bias
// table by the definition in model/mixers/aft.h (0 outside the window).
inline torch::Tensor AftBiasMatrix(const AftImpl& aft, int64_t time) {
  const int64_t window = aft.window();
  const auto table = aft.position_bias();
  const int64_t groups = table.defined() ? table.size(0) : 1;
  auto w = torch::zeros({groups, time, time}, torch::kDouble);
  if (!table.defined()) return w;
  auto t_acc = table.detach().to(torch::kDouble).contiguous();
  auto ta = t_acc.accessor<double, 3>();
  auto wa = w.accessor<double, 3>();
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t t = 0; t < time; ++t) {
      for (int64_t s = 0; s <= t; ++s) {
        if (t - s < window) wa[g][t][s] = ta[g][table.size(1) > 1 ? t : 0][t - s];
      }
    }
  }
  return w;
}

}  // namespace attn::testing
