// Tiny models for the tests: the one helper that builds their
// configurations, a tokenizer trained once per process on a synthetic
// corpus, and randomly initialised language models (no training: behaviour
// and numerics, not the text's quality, are under test).
#pragma once
#include <string>
#include <vector>

#include "model/lm/language_model.h"
#include "model/text/tokenizer.h"
#include "tests/tiny_tokenizer.h"

namespace attn::testing {

// The configuration every test model starts from: d_model 32, 2 layers, 4
// heads, ff_hidden 48, window 4, max_context 64, no positions. A test sets
// only the fields its case is about. short-conv is LFM2's hybrid (its
// layer 1 gqa), and both it and gqa take LFM2's options (SwiGLU, RMSNorm,
// normed queries and keys, grouped key/value heads).
LmConfig SmallLmConfig(MixerKind kind, int64_t vocab_size);

// SmallLmConfig over TinyTokenizer()'s vocabulary with max_context 512 and
// sinusoidal positions for the softmax kinds.
LmConfig TinyConfig(MixerKind kind);

// A model of TinyConfig(kind).
CausalLm TinyModel(MixerKind kind, uint64_t seed = 7);

// Logits [B, T, V] of `tokens` [B, T] fed as one stream on `device`: a
// prefill of each size in `chunks`, then a step per remaining token. The
// state takes the model's float type (a served model's is float32, the
// references' float64).
torch::Tensor StreamedLogits(CausalLm& model, const torch::Tensor& tokens, torch::Device device,
                             const std::vector<int64_t>& chunks);

// Writes `dir`/`name`.pt holding TinyModel(kind, seed) and TinyTokenizer().
std::string WriteTinyPackage(const std::string& dir, const std::string& name, MixerKind kind,
                             uint64_t seed = 7);

}  // namespace attn::testing
