// Tiny models for the server's tests: a tokenizer trained once per process
// on a synthetic corpus, and randomly initialised language models (no
// training: the server's behaviour, not the text's quality, is under test).
#pragma once
#include <string>

#include "model/language_model.h"
#include "model/tokenizer.h"

namespace attn::testing {

// Trained on first use; lives until the process ends.
const Tokenizer& TinyTokenizer();

// d_model 32, 2 layers, 4 heads, window 4; max_context 512 for the mixers
// that need it; sinusoidal positions for the softmax ones.
LmConfig TinyConfig(MixerKind kind);

// A model of TinyConfig(kind).
CausalLm TinyModel(MixerKind kind, uint64_t seed = 7);

// Writes `dir`/`name`.pt holding TinyModel(kind) and TinyTokenizer().
std::string WriteTinyPackage(const std::string& dir, const std::string& name, MixerKind kind);

}  // namespace attn::testing
