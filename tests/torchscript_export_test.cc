// A package's TorchScript methods (model/lm/torchscript_methods.h) against
// the C++ model they were exported from, for every kind: forward equals the
// model's logits, a step loop and chunked prefills equal forward, rows at
// different lengths step together, and Python runs the same methods.
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "model/lm/model_package.h"
#include "model/lm/torchscript_methods.h"
#include "tests/test_util.h"
#include "tests/tiny_model.h"

namespace attn {
namespace {

// Logits of the TorchScript methods and the C++ model agree this closely,
// relative to the largest logit (at least 1): both compute the same
// equations, in a different order of operations.
constexpr double kScriptTolerance = 1e-5;

// max |got - want| over max(1, max |want|).
double Gap(const torch::Tensor& got, const torch::Tensor& want) {
  return (got - want).abs().max().item<double>() / std::max(1.0, want.abs().max().item<double>());
}

struct ScriptCase {
  MixerKind kind;
  NormKind norm;
  PositionKind positions;
  // A hybrid shape instead of SmallLmConfig(kind)'s: Granite 4.0-H Tiny's
  // (kind mamba2: Mamba-2 blocks with SwiGLU feed-forwards after them, a gqa
  // layer with heads of its own and no positions, and a mixture of four
  // experts, two per token, beside every feed-forward).
  bool granite = false;
};

// SmallLmConfig's short-conv and gqa shapes are LFM2's: a gqa layer with
// normed queries and keys, rotary positions of base 1e6, two query heads
// per key/value head, SwiGLU feed-forwards and RMSNorms of eps 1e-6.
bool IsHybrid(const ScriptCase& c) {
  return c.granite || c.kind == MixerKind::kShortConv || c.kind == MixerKind::kGqa;
}

std::string CaseName(const ScriptCase& c) { return c.granite ? "granite" : MixerKindName(c.kind); }

// Every kind the methods cover, with each norm and position kind somewhere.
const std::vector<ScriptCase>& Cases() {
  static const std::vector<ScriptCase> cases = {
      {MixerKind::kAftConv, NormKind::kRmsNorm, PositionKind::kNone},
      {MixerKind::kAftLocal, NormKind::kLayerNorm, PositionKind::kLearned},
      {MixerKind::kAftFull, NormKind::kScaleNorm, PositionKind::kNone},
      {MixerKind::kAftSimple, NormKind::kRmsNorm, PositionKind::kSinusoidal},
      {MixerKind::kAftDecay, NormKind::kLayerNorm, PositionKind::kNone},
      {MixerKind::kLinearElu, NormKind::kLayerNorm, PositionKind::kNone},
      {MixerKind::kLinearExp, NormKind::kRmsNorm, PositionKind::kLearned},
      {MixerKind::kLinearDecay, NormKind::kRmsNorm, PositionKind::kNone},
      {MixerKind::kMha, NormKind::kRmsNorm, PositionKind::kSinusoidal},
      {MixerKind::kMhaAlibi, NormKind::kScaleNorm, PositionKind::kNone},
      {MixerKind::kRwkv7, NormKind::kLayerNorm, PositionKind::kNone},
      {MixerKind::kRwkv4, NormKind::kLayerNorm, PositionKind::kNone},
      {MixerKind::kMamba2, NormKind::kRmsNorm, PositionKind::kNone},
      {MixerKind::kShortConv, NormKind::kRmsNorm, PositionKind::kNone},
      {MixerKind::kGqa, NormKind::kRmsNorm, PositionKind::kNone},
      {MixerKind::kMamba2, NormKind::kRmsNorm, PositionKind::kNone, /*granite=*/true},
  };
  return cases;
}

CausalLm ModelFor(const ScriptCase& c) {
  LmConfig config = testing::SmallLmConfig(c.kind, testing::TinyTokenizer().vocab_size());
  config.norm = c.norm;
  config.positions = c.positions;
  config.chunk = 5;  // blocks that do not divide the sequences
  config.tie_embeddings =
      !IsWholeBlock(c.kind) || c.kind == MixerKind::kMamba2;     // RWKV's heads are their own
  if (c.kind == MixerKind::kGqa) config.tie_embeddings = false;  // a head of its own
  if (c.granite) {
    config.layers = 3;
    config.whole_block_ff = true;
    config.ff = FeedForwardKind::kSwiGlu;
    config.attention_layers = {1};
    config.attention_heads = 2;
    config.kv_heads = 1;
    config.rope = false;
    config.moe = {4, 2, 16};
  }
  torch::manual_seed(5);
  CausalLm model(config);
  testing::RandomizePositionParameters(*model, 0.5);
  if (IsHybrid(c)) {  // gains away from one, so that a norm's weight counts
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters()) {
      if (p.key().find("gain") != std::string::npos) p.value().normal_(1.0, 0.2);
    }
  }
  model->eval();
  return model;
}

std::vector<torch::Tensor> ToTensors(const c10::IValue& list) {
  std::vector<torch::Tensor> tensors;
  for (const auto& t : list.toListRef()) tensors.push_back(t.toTensor());
  return tensors;
}

class TorchScriptExportTest : public ::testing::TestWithParam<ScriptCase> {
 protected:
  void SetUp() override {
    model_ = ModelFor(GetParam());
    path_ = dir_.File("model.pt");
    ASSERT_TRUE(SavePackage(path_, model_, testing::TinyTokenizer().Serialized()).ok());
    module_ = torch::jit::load(path_);
  }

  c10::IValue InitState(int64_t batch) { return module_.get_method("init_state")({batch}); }

  // Runs `method` ("prefill" or "step") and returns its logits; `state`
  // becomes the returned state.
  torch::Tensor Run(const std::string& method, const torch::Tensor& tokens, c10::IValue& state) {
    auto out = module_.get_method(method)({tokens, state}).toTuple();
    state = out->elements()[1];
    return out->elements()[0].toTensor();
  }

  torch::NoGradGuard no_grad_;
  testing::ScopedTempDir dir_{"torchscript_export"};
  CausalLm model_{nullptr};
  std::string path_;
  torch::jit::Module module_;
};

TEST_P(TorchScriptExportTest, ForwardEqualsTheModel) {
  const int64_t vocab = model_->config().vocab_size;
  auto tokens = torch::randint(0, vocab, {2, 23}, torch::kLong);
  auto scripted = module_.forward({tokens}).toTensor();
  auto native = model_->forward(tokens);
  ASSERT_EQ(scripted.sizes(), native.sizes());
  EXPECT_LT(Gap(scripted, native), kScriptTolerance);
}

TEST_P(TorchScriptExportTest, StepLoopAndChunkedPrefillEqualForward) {
  const int64_t vocab = model_->config().vocab_size;
  auto tokens = torch::randint(0, vocab, {2, 23}, torch::kLong);
  auto full = module_.forward({tokens}).toTensor();
  // Steps only.
  c10::IValue state = InitState(2);
  for (int64_t t = 0; t < tokens.size(1); ++t) {
    auto logits = Run("step", tokens.select(1, t), state);
    EXPECT_LT(Gap(logits, full.select(1, t)), kScriptTolerance) << "t=" << t;
  }
  EXPECT_TRUE(ToTensors(state)[0].equal(torch::full({2}, 23, torch::kLong)));
  // Prefill chunks of 7 and 3, then steps.
  state = InitState(2);
  auto first = Run("prefill", tokens.narrow(1, 0, 7), state);
  auto second = Run("prefill", tokens.narrow(1, 7, 3), state);
  EXPECT_LT(Gap(first, full.narrow(1, 0, 7)), kScriptTolerance);
  EXPECT_LT(Gap(second, full.narrow(1, 7, 3)), kScriptTolerance);
  for (int64_t t = 10; t < tokens.size(1); ++t) {
    auto logits = Run("step", tokens.select(1, t), state);
    EXPECT_LT(Gap(logits, full.select(1, t)), kScriptTolerance) << "t=" << t;
  }
}

TEST_P(TorchScriptExportTest, RowsAtDifferentLengthsStepTogether) {
  const int64_t vocab = model_->config().vocab_size;
  auto a = torch::randint(0, vocab, {1, 15}, torch::kLong);
  auto b = torch::randint(0, vocab, {1, 6}, torch::kLong);
  auto full_a = module_.forward({a}).toTensor();
  auto full_b = module_.forward({b}).toTensor();
  // Row 0 reads 11 tokens of a, row 1 reads 2 of b; then both step together.
  c10::IValue state_a = InitState(1), state_b = InitState(1);
  Run("prefill", a.narrow(1, 0, 11), state_a);
  Run("prefill", b.narrow(1, 0, 2), state_b);
  std::vector<torch::Tensor> joined;
  auto ta = ToTensors(state_a), tb = ToTensors(state_b);
  for (size_t i = 0; i < ta.size(); ++i) joined.push_back(torch::cat({ta[i], tb[i]}));
  c10::IValue state{c10::List<torch::Tensor>(joined)};
  for (int64_t i = 0; i < 4; ++i) {
    auto logits = Run("step", torch::stack({a[0][11 + i], b[0][2 + i]}), state);
    EXPECT_LT(Gap(logits[0], full_a[0][11 + i]), kScriptTolerance) << i;
    EXPECT_LT(Gap(logits[1], full_b[0][2 + i]), kScriptTolerance) << i;
  }
}

TEST_P(TorchScriptExportTest, PrefillOfRowsAtDifferentLengthsIsAnError) {
  c10::IValue state = InitState(2);
  Run("step", torch::zeros({2}, torch::kLong), state);
  ToTensors(state)[0][0].fill_(3);
  try {
    Run("prefill", torch::zeros({2, 2}, torch::kLong), state);
    FAIL() << "prefill accepted rows at lengths 3 and 1";
  } catch (const std::exception& e) {  // the interpreter's JITException
    EXPECT_NE(std::string(e.what()).find("same length"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, TorchScriptExportTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) {
                           return info.param.granite ? std::string("Granite")
                                                     : testing::TestName(info.param.kind);
                         });

TEST(TorchScriptExport, BoundedKindsRefuseToRunPastTheirContext) {
  torch::NoGradGuard no_grad;
  testing::ScopedTempDir dir("torchscript_bounds");
  ScriptCase c{MixerKind::kMha, NormKind::kRmsNorm, PositionKind::kNone};
  CausalLm model = ModelFor(c);
  const std::string path = dir.File("mha.pt");
  ASSERT_TRUE(SavePackage(path, model, testing::TinyTokenizer().Serialized()).ok());
  auto module = torch::jit::load(path);
  const int64_t too_long = model->config().max_context + 1;
  try {
    module.forward({torch::zeros({1, too_long}, torch::kLong)});
    FAIL() << "forward accepted " << too_long << " tokens";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("at most 64"), std::string::npos) << e.what();
  }
}

// An int8 package's methods read its int8 buffers dequantised: they compute
// with the int8 model's weights, in any LibTorch, from a quarter of the
// bytes. They multiply float activations, where the native products round
// each row of activations to int8 too (kernels::Int8Gemm): the methods
// equal the C++ model once its int8 copies are dropped, and the native int8
// model within the activations' rounding.
TEST(TorchScriptExport, Int8PackagesRunTheInt8Model) {
  torch::NoGradGuard no_grad;
  testing::ScopedTempDir dir("torchscript_int8");
  for (const ScriptCase& c : Cases()) {
    CausalLm model = ModelFor(c);
    ASSERT_TRUE(QuantizeInt8(model).ok());
    const std::string path = dir.File(CaseName(c) + ".pt");
    ASSERT_TRUE(SavePackage(path, model, testing::TinyTokenizer().Serialized()).ok());
    auto module = torch::jit::load(path);
    const char* weight = c.kind == MixerKind::kMamba2 ? "layers_0_mixer_out_proj_weight"
                         : IsWholeBlock(c.kind)       ? "layers_0_mixer_ffn_value_weight"
                                                      : "layers_0_ff_down_weight";
    ASSERT_TRUE(module.hasattr(weight)) << CaseName(c) << " lacks " << weight;
    EXPECT_EQ(module.attr(weight).toTensor().scalar_type(), torch::kChar);
    auto tokens = torch::randint(0, model->config().vocab_size, {2, 23}, torch::kLong);
    auto scripted = module.forward({tokens}).toTensor();
    const torch::Tensor native_int8 = model->forward(tokens);
    const double scale = native_int8.abs().max().item<double>();
    // The hybrids' gated products (LFM2's b * u, SwiGLU's gate * up) compound
    // the activations' rounding more than the other kinds' layers. With
    // experts that rounding may move a token to other experts, a jump of
    // any size: the check against the float model below stands for it.
    if (!c.granite) {
      EXPECT_LT((scripted - native_int8).abs().max().item<double>(),
                (IsHybrid(c) ? 0.1 : 0.05) * scale)
          << CaseName(c);
    }
    // A weight of every expert is stored as int8 too.
    if (c.granite) {
      EXPECT_EQ(module.attr("layers_0_moe_experts_3_down_weight").toTensor().scalar_type(),
                torch::kChar);
    }
    for (auto& p : model->parameters()) p.mul_(1.0);  // a write drops the int8 copies
    ASSERT_FALSE(model->has_int8_weights());
    EXPECT_LT(Gap(scripted, model->forward(tokens)), kScriptTolerance) << CaseName(c);
    auto state = module.get_method("init_state")({int64_t{1}});
    auto row = tokens.narrow(0, 0, 1);
    for (int64_t t = 0; t < 5; ++t) {
      auto out = module.get_method("step")({row.select(1, t), state}).toTuple();
      state = out->elements()[1];
      auto native = model->forward(row.narrow(1, 0, t + 1)).select(1, t);
      EXPECT_LT(Gap(out->elements()[0].toTensor(), native), kScriptTolerance)
          << CaseName(c) << " t=" << t;
    }
  }
}

// Python, with nothing of this project installed, loads every kind's
// package and checks forward against the C++ model's logits and a step loop
// against forward (tests/python/check_torchscript.py).
TEST(TorchScriptExport, PythonRunsEveryKind) {
  torch::NoGradGuard no_grad;
  testing::ScopedTempDir dir("torchscript_python");
  for (const ScriptCase& c : Cases()) {
    CausalLm model = ModelFor(c);
    const std::string name = CaseName(c);
    ASSERT_TRUE(
        SavePackage(dir.File(name + ".pt"), model, testing::TinyTokenizer().Serialized()).ok());
    torch::manual_seed(11);
    auto tokens = torch::randint(0, model->config().vocab_size, {2, 19}, torch::kLong);
    auto logits = model->forward(tokens).contiguous();
    std::ofstream out(dir.File(name + ".expected"));
    out.precision(9);
    for (int64_t i = 0; i < tokens.numel(); ++i) out << tokens.data_ptr<int64_t>()[i] << ' ';
    out << '\n';
    for (int64_t i = 0; i < logits.numel(); ++i) out << logits.data_ptr<float>()[i] << ' ';
    out << '\n';
  }
  const std::string command = std::string("/usr/bin/python3 ") + ATTN_SOURCE_DIR +
                              "/tests/python/check_torchscript.py " + dir.path().string();
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
}

}  // namespace
}  // namespace attn
