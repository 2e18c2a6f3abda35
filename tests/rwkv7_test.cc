// The rwkv7 block against RWKV-7's equations in float64 (tests/rwkv7_reference.h):
// the parallel form, chunked prefill over pool rows and the token-by-token
// step, on the fused CPU path and on the op-by-op path a GPU runs; 8,200
// tokens with the decay at both ends of its range, an in-context rate near 1
// and large keys; and the language model built of it.
#include "model/mixers/rwkv7.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "model/lm/language_model.h"
#include "tests/rwkv7_reference.h"
#include "tests/test_util.h"

namespace attn {
namespace {

using testing::RelativeError;

constexpr int64_t kChannels = 32, kHeads = 4;

MixerOptions BlockOptions(int64_t layer, bool fused) {
  MixerOptions o;
  o.kind = MixerKind::kRwkv7;
  o.d_model = kChannels;
  o.heads = kHeads;
  o.ff_hidden = 48;
  o.rwkv7_ranks = {8, 8, 6, 10};
  o.layer = layer;
  o.fused_kernels = fused;
  return o;
}

// Every parameter random (the initialisation zeroes the outputs, which
// would hide most of the block), mixes in [0, 1], norms near 1.
void Randomize(torch::nn::Module& block, uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : block.named_parameters()) {
    const std::string& name = p.key();
    if (name.rfind("mix", 0) == 0 || name == "ffn_mix") {
      p.value().uniform_(0.0, 1.0);
    } else if (name.find("gain") != std::string::npos) {
      p.value().uniform_(0.5, 1.5);
    } else if (p.value().dim() == 2 && name != "bonus") {
      p.value().normal_(0.0, 1.0 / std::sqrt(static_cast<double>(p.value().size(1))));
    } else {
      p.value().normal_(0.0, 0.5);
    }
  }
}

struct Stack {
  std::vector<Rwkv7> blocks;
  std::vector<reference::Rwkv7Weights> weights;
};

Stack MakeStack(int64_t layers, bool fused, uint64_t seed) {
  Stack s;
  for (int64_t l = 0; l < layers; ++l) {
    s.blocks.emplace_back(BlockOptions(l, fused));
    Randomize(*s.blocks.back(), seed + l);
    s.blocks.back()->eval();
  }
  for (auto& b : s.blocks) s.weights.push_back(reference::Rwkv7WeightsOf(*b));
  return s;
}

// The float64 reference's outputs for each sequence of x [B, T, C].
torch::Tensor Reference(const Stack& s, const torch::Tensor& x) {
  std::vector<torch::Tensor> rows;
  for (int64_t b = 0; b < x.size(0); ++b) {
    std::vector<reference::Rwkv7State> states(s.blocks.size(),
                                              reference::EmptyRwkv7State(kChannels, kHeads));
    rows.push_back(reference::FromMatrix(
        reference::Rwkv7Stack(s.weights, kHeads, 64e-5, reference::ToMatrix(x[b]), states)));
  }
  return torch::stack(rows);
}

torch::Tensor Forward(Stack& s, const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  LayerCarry carry;
  torch::Tensor h = x;
  for (auto& b : s.blocks) h = b->ForwardWithCarry(h, carry);
  return h;
}

// Prefill in chunks of `chunk` tokens, then the rest token by token, in pool
// rows `rows` of a pool of 5.
torch::Tensor PrefillThenSteps(Stack& s, const torch::Tensor& x, int64_t chunk, int64_t prefilled,
                               const std::vector<int64_t>& rows) {
  torch::NoGradGuard no_grad;
  std::vector<MixerState> states;
  for (auto& b : s.blocks) states.push_back(b->initial_state(5, torch::kCPU));
  const auto slots = torch::tensor(rows, torch::kLong);
  std::vector<torch::Tensor> outputs;
  for (int64_t t = 0; t < prefilled; t += chunk) {
    const int64_t len = std::min(chunk, prefilled - t);
    LayerCarry carry;
    torch::Tensor h = x.narrow(1, t, len);
    for (size_t l = 0; l < s.blocks.size(); ++l) {
      h = s.blocks[l]->PrefillWithCarry(h, states[l], slots, len, carry);
    }
    outputs.push_back(h);
  }
  for (int64_t t = prefilled; t < x.size(1); ++t) {
    LayerCarry carry;
    torch::Tensor h = x.select(1, t);
    for (size_t l = 0; l < s.blocks.size(); ++l) {
      h = s.blocks[l]->StepWithCarry(h, states[l], slots, carry);
    }
    outputs.push_back(h.unsqueeze(1));
  }
  return torch::cat(outputs, 1);
}

class Rwkv7FormsTest : public ::testing::TestWithParam<bool> {};  // fused or op by op

TEST_P(Rwkv7FormsTest, ParallelChunkedAndStepFormsEqualTheFloat64Equations) {
  Stack s = MakeStack(3, GetParam(), 11);
  torch::manual_seed(3);
  const auto x = torch::randn({2, 40, kChannels});
  const auto expected = Reference(s, x);
  EXPECT_LT(RelativeError(Forward(s, x), expected), 2e-5);
  EXPECT_LT(RelativeError(PrefillThenSteps(s, x, 7, 33, {3, 1}), expected), 2e-5);
  EXPECT_LT(RelativeError(PrefillThenSteps(s, x, 40, 0, {0, 4}), expected), 2e-5);
}

TEST_P(Rwkv7FormsTest, PrefillKeepingTheLastOutputsUpdatesTheSameState) {
  Stack s = MakeStack(2, GetParam(), 5);
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  const auto x = torch::randn({1, 9, kChannels});
  const auto whole = Forward(s, x);
  for (int64_t keep : {0, 1, 3}) {
    SCOPED_TRACE(keep);
    std::vector<MixerState> states;
    for (auto& b : s.blocks) states.push_back(b->initial_state(1, torch::kCPU));
    LayerCarry carry;
    torch::Tensor h = s.blocks[0]->PrefillWithCarry(x, states[0], {}, 9, carry);
    h = s.blocks[1]->PrefillWithCarry(h, states[1], {}, keep, carry);
    ASSERT_EQ(h.size(1), keep);
    if (keep > 0) {
      EXPECT_TRUE(torch::allclose(h, whole.narrow(1, 9 - keep, keep), 1e-5, 1e-5));
    }
    // The state continues as if every output had been kept.
    LayerCarry next;
    const auto token = torch::randn({1, kChannels});
    auto stepped = s.blocks[1]->StepWithCarry(
        s.blocks[0]->StepWithCarry(token, states[0], {}, next), states[1], {}, next);
    const auto all = Forward(s, torch::cat({x, token.unsqueeze(1)}, 1));
    EXPECT_TRUE(torch::allclose(stepped, all.select(1, 9), 1e-5, 1e-5));
  }
}

// Prefills a stack over x in rows `slots` of `states`, all outputs wanted;
// with `kept`, each layer keeps its update's inputs there.
torch::Tensor Feed(Stack& s, std::vector<MixerState>& states, const torch::Tensor& x,
                   const torch::Tensor& slots, std::vector<std::vector<torch::Tensor>>* kept) {
  LayerCarry carry;
  torch::Tensor h = x;
  for (size_t l = 0; l < s.blocks.size(); ++l) {
    carry.updates = kept == nullptr ? nullptr : &(*kept)[l];
    h = s.blocks[l]->PrefillWithCarry(h, states[l], slots, x.size(1), carry);
  }
  return h;
}

std::vector<MixerState> Copy(const std::vector<MixerState>& states) {
  std::vector<MixerState> copies;
  for (const MixerState& state : states) copies.push_back(testing::CopyState(state));
  return copies;
}

// Speculation's rollback: what a chunk kept of its updates advances rows at
// the chunk's start by a prefix of it as feeding the prefix does (every
// state tensor, and the outputs after), with no projection run.
TEST_P(Rwkv7FormsTest, KeptUpdatesReplayAPrefixAsFeedingItDoes) {
  Stack s = MakeStack(2, GetParam(), 9);
  torch::NoGradGuard no_grad;
  torch::manual_seed(6);
  const auto history = torch::randn({2, 5, kChannels}), chunk = torch::randn({2, 6, kChannels});
  const auto next = torch::randn({2, 3, kChannels});
  const auto slots = torch::tensor({int64_t{3}, int64_t{1}});
  std::vector<MixerState> start;
  for (auto& b : s.blocks) start.push_back(b->initial_state(4, torch::kCPU));
  Feed(s, start, history, slots, nullptr);
  for (int64_t count : {0, 1, 4, 6}) {
    SCOPED_TRACE(count);
    std::vector<MixerState> checked = Copy(start), replayed = Copy(start), fed = Copy(start);
    std::vector<std::vector<torch::Tensor>> kept(s.blocks.size());
    Feed(s, checked, chunk, slots, &kept);
    for (size_t l = 0; l < s.blocks.size(); ++l) {
      ASSERT_EQ(kept[l].size(), 7u);
      ASSERT_TRUE(s.blocks[l]->ReplayUpdates(kept[l], replayed[l], slots, count));
    }
    if (count > 0) Feed(s, fed, chunk.narrow(1, 0, count), slots, nullptr);
    for (size_t l = 0; l < s.blocks.size(); ++l) {
      EXPECT_LT(testing::StateDifference(replayed[l], fed[l]), 1e-5) << "layer " << l;
    }
    EXPECT_LT(
        RelativeError(Feed(s, replayed, next, slots, nullptr), Feed(s, fed, next, slots, nullptr)),
        1e-5);
  }
  // A chunk whose outputs are not all wanted keeps nothing.
  std::vector<std::vector<torch::Tensor>> kept(1);
  LayerCarry carry;
  carry.updates = &kept[0];
  std::vector<MixerState> states = Copy(start);
  s.blocks[0]->PrefillWithCarry(chunk, states[0], slots, 2, carry);
  EXPECT_TRUE(kept[0].empty());
}

INSTANTIATE_TEST_SUITE_P(Paths, Rwkv7FormsTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "fused" : "ops"; });

// The decay at both ends of its range (about 0.545 and 1), an in-context rate
// near 1 (near-total removal of what a key held), keys 30 times larger, and
// 8,200 tokens: the step loop, a chunked prefill and the parallel form stay
// on the float64 equations.
TEST(Rwkv7LongTest, ExtremeDecaysRatesAndKeysStayExactPast8192Tokens) {
  Stack s = MakeStack(2, true, 21);
  {
    torch::NoGradGuard no_grad;
    for (auto& b : s.blocks) {
      for (auto& p : b->named_parameters()) {
        if (p.key() == "decay_up.weight" || p.key() == "iclr_up.weight") p.value().zero_();
        if (p.key() == "decay_bias") {  // alternate channels: w = 0.545 and w = 1
          auto bias = p.value();
          bias.copy_(torch::where(torch::arange(kChannels).remainder(2).eq(0),
                                  torch::full({kChannels}, 30.0), torch::full({kChannels}, -30.0)));
        }
        if (p.key() == "iclr_bias") p.value().fill_(12.0);  // iclr = 1 - 6e-6
        if (p.key() == "key.weight") p.value().mul_(30.0);
      }
    }
    s.weights.clear();
    for (auto& b : s.blocks) s.weights.push_back(reference::Rwkv7WeightsOf(*b));
  }
  torch::manual_seed(8);
  const int64_t tokens = 8200;
  const auto x = torch::randn({1, tokens, kChannels});
  const auto expected = Reference(s, x);
  const auto stepped = PrefillThenSteps(s, x, 256, 4096, {2});
  const auto parallel = Forward(s, x);
  for (int64_t from : {0, 4000, 8100}) {
    SCOPED_TRACE(from);
    const auto want = expected.narrow(1, from, 100);
    EXPECT_LT(RelativeError(stepped.narrow(1, from, 100), want), 1e-4);
    EXPECT_LT(RelativeError(parallel.narrow(1, from, 100), want), 1e-4);
  }
}

// The language model of rwkv7 blocks: embedding, blocks handing the first
// layer's values up (LayerCarry), final LayerNorm, a head of its own.
TEST(Rwkv7ModelTest, LogitsEqualTheFloat64Equations) {
  LmConfig config;
  config.vocab_size = 50;
  config.d_model = kChannels;
  config.layers = 3;
  config.heads = kHeads;
  config.ff_hidden = 40;
  config.mixer = MixerKind::kRwkv7;
  config.norm = NormKind::kLayerNorm;
  config.tie_embeddings = false;
  config.rwkv7_ranks = {8, 8, 8, 8};
  CausalLm model(config);
  for (auto& child : model->named_modules()) {
    if (auto* block = dynamic_cast<Rwkv7Impl*>(child.value().get())) Randomize(*block, 31);
  }
  model->eval();
  model->to(torch::kDouble);
  const auto tokens = torch::randint(0, 50, {1, 17}, torch::kLong);
  torch::NoGradGuard no_grad;
  const auto logits = model->forward(tokens);

  std::map<std::string, torch::Tensor> named;
  for (const auto& p : model->named_parameters()) named[p.key()] = p.value();
  std::vector<reference::Rwkv7Weights> blocks;
  for (auto& child : model->named_modules()) {
    if (auto* block = dynamic_cast<Rwkv7Impl*>(child.value().get())) {
      blocks.push_back(reference::Rwkv7WeightsOf(*block));
    }
  }
  ASSERT_EQ(blocks.size(), 3u);
  std::vector<reference::Rwkv7State> states(3, reference::EmptyRwkv7State(kChannels, kHeads));
  const auto embedded = named.at("embedding.weight").index_select(0, tokens[0]);
  const auto hidden = reference::FromMatrix(
      reference::Rwkv7Stack(blocks, kHeads, 64e-5, reference::ToMatrix(embedded), states));
  const auto normed = torch::layer_norm(hidden, {kChannels}, named.at("final_norm.gain"),
                                        named.at("final_norm.bias"), 1e-5);
  const auto expected = torch::matmul(normed, named.at("head_weight").t());
  EXPECT_LT(RelativeError(logits[0], expected), 1e-10);
}

}  // namespace
}  // namespace attn
