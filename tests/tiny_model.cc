#include "tests/tiny_model.h"

#include <torch/torch.h>

#include <mutex>

#include "model/lm/model_package.h"
#include "tests/test_util.h"

namespace attn::testing {

LmConfig SmallLmConfig(MixerKind kind, int64_t vocab_size) {
  LmConfig c;
  c.vocab_size = vocab_size;
  c.d_model = 32;
  c.layers = 2;
  c.heads = 4;
  c.ff_hidden = 48;
  c.mixer = kind;
  c.window = 4;
  c.max_context = 64;
  c.positions = PositionKind::kNone;
  if (IsWholeBlock(kind)) c.norm = WholeBlockNorm(kind);
  if (kind == MixerKind::kRwkv7) c.rwkv7_ranks = {8, 8, 8, 8};  // small low-rank paths
  if (kind == MixerKind::kRwkv4) c.rescale_every = 1;           // every layer halves
  if (kind == MixerKind::kMamba2) c.mamba2 = {8, 4, 2, 2};
  if (kind == MixerKind::kShortConv || kind == MixerKind::kGqa) {
    // LFM2's shape: a hybrid whose second layer is grouped-query attention
    // (two query heads per key/value head, normed queries and keys), SwiGLU
    // feed-forwards, RMSNorms of another eps.
    if (kind == MixerKind::kShortConv) c.attention_layers = {1};
    c.kv_heads = 2;
    c.qk_norm = true;
    c.rope_theta = 1e6;
    c.ff = FeedForwardKind::kSwiGlu;
    c.norm = NormKind::kRmsNorm;
    c.norm_eps = 1e-6;
  }
  return c;
}

LmConfig TinyConfig(MixerKind kind) {
  LmConfig c = SmallLmConfig(kind, TinyTokenizer().vocab_size());
  c.max_context = 512;
  if (kind == MixerKind::kMha || kind == MixerKind::kRelative)
    c.positions = PositionKind::kSinusoidal;
  return c;
}

CausalLm TinyModel(MixerKind kind, uint64_t seed) {
  torch::manual_seed(seed);
  CausalLm model(TinyConfig(kind));
  RandomizePositionParameters(*model, 0.3);
  // Larger output logits than the initialisation gives, so greedy choices
  // are not near-ties that float noise could flip.
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters()) {
      if (p.key().find("embedding") != std::string::npos) p.value().mul_(3.0);
    }
  }
  model->eval();
  return model;
}

std::string WriteTinyPackage(const std::string& dir, const std::string& name, MixerKind kind,
                             uint64_t seed) {
  CausalLm model = TinyModel(kind, seed);
  const std::string path = dir + "/" + name + ".pt";
  absl::Status saved = SavePackage(path, model, TinyTokenizer().Serialized());
  if (!saved.ok()) {
    std::fprintf(stderr, "package: %s\n", saved.ToString().c_str());
    std::abort();
  }
  return path;
}

torch::Tensor StreamedLogits(CausalLm& model, const torch::Tensor& tokens, torch::Device device,
                             const std::vector<int64_t>& chunks) {
  torch::NoGradGuard no_grad;
  LmState state = model->initial_state(tokens.size(0), device);
  // The model's arithmetic's type (float64 for a reference): a parameter's,
  // but not that of a weight holding only its bf16 values.
  torch::ScalarType dtype = torch::kFloat;
  for (const torch::Tensor& p : model->parameters()) {
    if (p.scalar_type() != torch::kBFloat16) {
      dtype = p.scalar_type();
      break;
    }
  }
  for (MixerState& layer : state.layers) {
    for (torch::Tensor& t : layer.tensors) {
      if (t.is_floating_point()) t = t.to(dtype);
    }
  }
  std::vector<torch::Tensor> outputs;
  int64_t t = 0;
  for (int64_t chunk : chunks) {
    outputs.push_back(model->prefill(tokens.narrow(1, t, chunk), state));
    t += chunk;
  }
  for (; t < tokens.size(1); ++t) {
    outputs.push_back(model->step(tokens.select(1, t), {}, state).unsqueeze(1));
  }
  return torch::cat(outputs, 1);
}

}  // namespace attn::testing
