// The rwkv4 and mamba2 blocks against their equations in float64
// (tests/recurrent_reference.h): the parallel form, chunked prefill over pool
// rows, prefill keeping only the last outputs and the token-by-token step,
// on the fused CPU path and on the op-by-op path a GPU runs; long streams
// with extreme keys and time steps; the language models built of them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "model/lm/language_model.h"
#include "model/mixers/mixer.h"
#include "tests/recurrent_reference.h"
#include "tests/test_util.h"

namespace attn {
namespace recurrent_blocks_test {
namespace {

using testing::RelativeError;

constexpr int64_t kChannels = 32;

struct Case {
  MixerKind kind;
  bool fused;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return MixerKindName(info.param.kind) == "rwkv4"
             ? (info.param.fused ? "rwkv4_fused" : "rwkv4_ops")
             : (info.param.fused ? "mamba2_fused" : "mamba2_ops");
}

MixerOptions BlockOptions(MixerKind kind, int64_t layer, bool fused) {
  MixerOptions o;
  o.kind = kind;
  o.d_model = kChannels;
  o.heads = kind == MixerKind::kMamba2 ? 8 : 1;  // mamba2: P = 2 * 32 / 8 = 8
  o.ff_hidden = 48;
  o.rescale_every = 2;  // layer 1 halves its output
  o.mamba2 = {16, 4, 2, 2};
  o.layer = layer;
  o.fused_kernels = fused;
  return o;
}

// Every parameter random (the initialisation zeroes the outputs, which
// would hide most of the block): mixes in [0, 1], gains near 1.
void Randomize(torch::nn::Module& block, uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : block.named_parameters()) {
    const std::string& name = p.key();
    if (name.find("mix") != std::string::npos) {
      p.value().uniform_(0.0, 1.0);
    } else if (name.find("gain") != std::string::npos || name == "out_norm_weight") {
      p.value().uniform_(0.5, 1.5);
    } else if (p.value().dim() == 2) {
      p.value().normal_(0.0, 1.0 / std::sqrt(static_cast<double>(p.value().size(1))));
    } else {
      p.value().normal_(0.0, 0.5);
    }
  }
}

struct Stack {
  MixerKind kind;
  std::vector<std::shared_ptr<SequenceMixer>> blocks;
};

Stack MakeStack(const Case& c, int64_t layers, uint64_t seed) {
  Stack s{c.kind, {}};
  for (int64_t l = 0; l < layers; ++l) {
    s.blocks.push_back(MakeMixer(BlockOptions(c.kind, l, c.fused)));
    Randomize(*s.blocks.back(), seed + l);
    s.blocks.back()->eval();
  }
  return s;
}

// The float64 outputs for each sequence of x [B, T, C].
torch::Tensor Reference(const Stack& s, const torch::Tensor& x) {
  std::vector<torch::Tensor> rows;
  for (int64_t b = 0; b < x.size(0); ++b) {
    std::vector<reference::Rwkv4Block> rwkv4;
    std::vector<reference::Mamba2Block> mamba2;
    for (size_t l = 0; l < s.blocks.size(); ++l) {
      const MixerOptions& o = s.blocks[l]->options();
      const auto params = reference::ParamsOf(*s.blocks[l]);
      if (s.kind == MixerKind::kRwkv4) {
        rwkv4.emplace_back(params, l == 0, (o.layer + 1) % o.rescale_every == 0);
      } else {
        mamba2.emplace_back(params, o.heads, o.mamba2);
      }
    }
    reference::Matrix out;
    for (const auto& token : reference::ToMatrix(x[b])) {
      reference::Vector h = token;
      for (auto& block : rwkv4) h = block.Next(h);
      for (auto& block : mamba2) h = block.Next(h);
      out.push_back(h);
    }
    rows.push_back(reference::FromMatrix(out));
  }
  return torch::stack(rows);
}

torch::Tensor Forward(Stack& s, const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  torch::Tensor h = x;
  for (auto& b : s.blocks) h = b->forward(h);
  return h;
}

// Prefill in chunks of `chunk` tokens (keeping `keep` outputs of each, the
// rest recomputed by nobody: those positions are compared only when kept),
// then the rest token by token, in pool rows `rows` of a pool of 5.
torch::Tensor PrefillThenSteps(Stack& s, const torch::Tensor& x, int64_t chunk, int64_t prefilled,
                               const std::vector<int64_t>& rows) {
  torch::NoGradGuard no_grad;
  std::vector<MixerState> states;
  for (auto& b : s.blocks) states.push_back(b->initial_state(5, torch::kCPU));
  const auto slots = torch::tensor(rows, torch::kLong);
  std::vector<torch::Tensor> outputs;
  for (int64_t t = 0; t < prefilled; t += chunk) {
    torch::Tensor h = x.narrow(1, t, std::min(chunk, prefilled - t));
    for (size_t l = 0; l < s.blocks.size(); ++l) h = s.blocks[l]->prefill(h, states[l], slots);
    outputs.push_back(h);
  }
  for (int64_t t = prefilled; t < x.size(1); ++t) {
    torch::Tensor h = x.select(1, t);
    for (size_t l = 0; l < s.blocks.size(); ++l) h = s.blocks[l]->step(h, states[l], slots);
    outputs.push_back(h.unsqueeze(1));
  }
  return torch::cat(outputs, 1);
}

class RecurrentFormsTest : public ::testing::TestWithParam<Case> {};

TEST_P(RecurrentFormsTest, ParallelChunkedAndStepFormsEqualTheFloat64Equations) {
  Stack s = MakeStack(GetParam(), 3, 11);
  torch::manual_seed(3);
  const auto x = torch::randn({2, 40, kChannels});
  const auto expected = Reference(s, x);
  EXPECT_LT(RelativeError(Forward(s, x), expected), 2e-5);
  EXPECT_LT(RelativeError(PrefillThenSteps(s, x, 7, 33, {3, 1}), expected), 2e-5);
  EXPECT_LT(RelativeError(PrefillThenSteps(s, x, 40, 0, {0, 4}), expected), 2e-5);
  EXPECT_LT(RelativeError(PrefillThenSteps(s, x, 1, 40, {2, 0}), expected), 2e-5);
}

TEST_P(RecurrentFormsTest, PrefillKeepingTheLastOutputsUpdatesTheSameState) {
  Stack s = MakeStack(GetParam(), 2, 5);
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  const auto x = torch::randn({2, 30, kChannels});
  const auto next = torch::randn({2, kChannels});
  for (int64_t keep : {0, 1, 5}) {
    auto& block = s.blocks[0];
    auto full = block->initial_state(2, torch::kCPU), kept = block->initial_state(2, torch::kCPU);
    const auto all = block->prefill(x, full);
    const auto last = block->prefill_last(x, kept, {}, keep);
    ASSERT_EQ(last.size(1), keep);
    if (keep > 0) {
      EXPECT_LT(RelativeError(last, all.narrow(1, 30 - keep, keep)), 1e-6);
    }
    for (size_t i = 0; i < full.tensors.size(); ++i) {
      EXPECT_TRUE(torch::allclose(full.tensors[i], kept.tensors[i], 1e-6, 1e-6)) << "tensor " << i;
    }
    EXPECT_LT(RelativeError(block->step(next, kept), block->step(next, full)), 1e-6);
  }
}

// Speculation's rollback (SequenceMixer::ReplayUpdates): Mamba-2 keeps a
// chunk's input projection and replays a prefix of the chunk by the
// convolution and the scan alone, as feeding the prefix does; RWKV-4 keeps
// nothing and refuses.
TEST_P(RecurrentFormsTest, KeptUpdatesReplayAPrefixAsFeedingItDoes) {
  Stack s = MakeStack(GetParam(), 1, 9);
  auto block = std::dynamic_pointer_cast<WholeBlockMixer>(s.blocks[0]);
  ASSERT_NE(block, nullptr);
  torch::NoGradGuard no_grad;
  torch::manual_seed(6);
  const auto history = torch::randn({2, 5, kChannels}), chunk = torch::randn({2, 6, kChannels});
  const auto next = torch::randn({2, 3, kChannels});
  const auto slots = torch::tensor({int64_t{3}, int64_t{1}});
  const bool keeps = GetParam().kind == MixerKind::kMamba2;
  MixerState start = block->initial_state(4, torch::kCPU);
  block->prefill(history, start, slots);
  for (int64_t count : {0, 1, 2, 6}) {
    SCOPED_TRACE(count);
    MixerState checked = testing::CopyState(start), replayed = testing::CopyState(start);
    MixerState fed = testing::CopyState(start);
    std::vector<torch::Tensor> kept;
    LayerCarry carry;
    carry.updates = &kept;
    block->PrefillWithCarry(chunk, checked, slots, 1, carry);
    EXPECT_EQ(kept.empty(), !keeps);
    ASSERT_EQ(block->ReplayUpdates(kept, replayed, slots, count), keeps);
    if (!keeps) continue;
    if (count > 0) block->prefill(chunk.narrow(1, 0, count), fed, slots);
    EXPECT_LT(testing::StateDifference(replayed, fed), 1e-5);
    EXPECT_LT(
        RelativeError(block->prefill(next, replayed, slots), block->prefill(next, fed, slots)),
        1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, RecurrentFormsTest,
                         ::testing::Values(Case{MixerKind::kRwkv4, true},
                                           Case{MixerKind::kRwkv4, false},
                                           Case{MixerKind::kMamba2, true},
                                           Case{MixerKind::kMamba2, false}),
                         CaseName);

// Keys of magnitude ~60 overflow e^k in float32: only the running maximum
// keeps the sums finite. 2,500 tokens with decays from very slow to very
// fast, against the plain sums in float64.
TEST(Rwkv4LongTest, LargeKeysAndExtremeDecaysStayExactOverLongStreams) {
  for (bool fused : {true, false}) {
    Stack s = MakeStack({MixerKind::kRwkv4, fused}, 1, 21);
    {
      torch::NoGradGuard no_grad;
      auto named = s.blocks[0]->named_parameters();
      named["key.weight"].mul_(30.0);
      named["time_decay"].copy_(torch::linspace(-9.0, 3.0, kChannels));
    }
    torch::manual_seed(8);
    const int64_t time = fused ? 2500 : 600;
    const auto x = torch::randn({1, time, kChannels});
    const auto expected = Reference(s, x);
    const auto chunked = PrefillThenSteps(s, x, 256, time - 20, {1});
    EXPECT_TRUE(torch::isfinite(chunked).all().item<bool>());
    EXPECT_LT(RelativeError(chunked, expected), 1e-4) << (fused ? "fused" : "ops");
  }
}

// Time steps from ~0 (the state holds) to ~30 (it forgets at once), over
// 4,000 tokens.
TEST(Mamba2LongTest, ExtremeTimeStepsStayExactOverLongStreams) {
  for (bool fused : {true, false}) {
    Stack s = MakeStack({MixerKind::kMamba2, fused}, 1, 22);
    {
      torch::NoGradGuard no_grad;
      auto named = s.blocks[0]->named_parameters();
      named["dt_bias"].copy_(torch::linspace(-12.0, 30.0, 8));
    }
    torch::manual_seed(9);
    const int64_t time = fused ? 4000 : 600;
    const auto x = torch::randn({1, time, kChannels});
    const auto expected = Reference(s, x);
    const auto chunked = PrefillThenSteps(s, x, 256, time - 20, {2});
    EXPECT_LT(RelativeError(chunked, expected), 1e-4) << (fused ? "fused" : "ops");
  }
}

// The chunked form (SSD) of the op-by-op path is the recurrence rewritten,
// not an approximation: run in float64 over 8,300 tokens (130 blocks of
// 64, a partial one at the end), in one call and in prefill chunks that
// cut blocks anywhere, it equals the float64 loop to rounding. Time steps
// span holding (dt ~ 0) to forgetting at once.
TEST(Mamba2ChunkedTest, ChunkedFormEqualsTheRecurrenceInFloat64PastEightThousandTokens) {
  Stack s = MakeStack({MixerKind::kMamba2, false}, 1, 23);
  auto& block = s.blocks[0];
  {
    torch::NoGradGuard no_grad;
    block->named_parameters()["dt_bias"].copy_(torch::linspace(-10.0, 12.0, 8));
  }
  block->to(torch::kDouble);
  torch::manual_seed(10);
  const int64_t time = 8300;
  const auto x = torch::randn({1, time, kChannels}, torch::kDouble);
  const auto expected = Reference(s, x);
  EXPECT_LT(RelativeError(Forward(s, x), expected), 1e-10);

  torch::NoGradGuard no_grad;
  MixerState state = block->initial_state(3, torch::kCPU);
  for (auto& t : state.tensors) t = t.to(torch::kDouble);
  const auto rows = torch::tensor({1}, torch::kLong);
  std::vector<torch::Tensor> outputs;
  for (int64_t t = 0, chunk = 1000; t < time - 10; t += chunk, chunk = 1237) {
    outputs.push_back(block->prefill(x.narrow(1, t, std::min(chunk, time - 10 - t)), state, rows));
  }
  for (int64_t t = time - 10; t < time; ++t) {
    outputs.push_back(block->step(x.select(1, t), state, rows).unsqueeze(1));
  }
  EXPECT_LT(RelativeError(torch::cat(outputs, 1), expected), 1e-10);
}

LmConfig ModelConfig(MixerKind kind) {
  LmConfig c;
  c.vocab_size = 50;
  c.d_model = kChannels;
  c.layers = 3;
  c.ff_hidden = 48;
  c.mixer = kind;
  c.heads = kind == MixerKind::kMamba2 ? 8 : 1;
  c.norm = WholeBlockNorm(kind);
  c.tie_embeddings = kind == MixerKind::kMamba2;
  c.rescale_every = 2;
  c.mamba2 = {16, 4, 2, 2};
  return c;
}

TEST(RecurrentModelTest, LogitsEqualTheFloat64Equations) {
  for (MixerKind kind : {MixerKind::kRwkv4, MixerKind::kMamba2}) {
    torch::manual_seed(12);
    CausalLm model(ModelConfig(kind));
    for (auto& layer : model->modules(false)) {
      if (auto* block = dynamic_cast<SequenceMixer*>(layer.get())) {
        Randomize(*block, 30);
      }
    }
    model->eval();
    std::vector<int64_t> tokens;
    for (int64_t t = 0; t < 25; ++t) tokens.push_back((t * 7 + 3) % 50);
    const auto expected = reference::FromMatrix(
        reference::LmLogits(model->config(), reference::ParamsOf(*model), tokens));
    torch::NoGradGuard no_grad;
    const auto logits = model->forward(torch::tensor(tokens).unsqueeze(0))[0];
    EXPECT_LT(RelativeError(logits, expected), 2e-5) << MixerKindName(kind);
    // Chunked prefill and steps of the whole model, rows 1 and 3 of 4.
    LmState state = model->initial_state(4, torch::kCPU);
    const auto slots = torch::tensor({1, 3}, torch::kLong);
    const auto batch = torch::tensor(tokens).unsqueeze(0).repeat({2, 1});
    std::vector<torch::Tensor> out = {model->prefill(batch.narrow(1, 0, 10), state, slots)};
    for (int64_t t = 10; t < 25; ++t) {
      out.push_back(model->step(batch.select(1, t), slots, state).unsqueeze(1));
    }
    EXPECT_LT(RelativeError(torch::cat(out, 1)[1], expected), 2e-5) << MixerKindName(kind);
  }
}

}  // namespace
}  // namespace recurrent_blocks_test
}  // namespace attn
