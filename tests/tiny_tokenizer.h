// A SentencePiece tokenizer for tests, trained once per process on a small
// synthetic corpus (300 pieces). No LibTorch: tests of text and sampling
// include this alone.
#pragma once

#include "model/text/tokenizer.h"

namespace attn::testing {

// Trained on first use; lives until the process ends.
const Tokenizer& TinyTokenizer();

}  // namespace attn::testing
