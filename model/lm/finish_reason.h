// Why a generated sequence ended (model/lm/continuation.h decides it).
#pragma once

namespace attn {

enum class FinishReason {
  kUnspecified,  // it has not ended
  kLength,       // max_tokens, or the model's context, reached
  kStop,         // its text reached a stop string
  kEos,          // it chose the end-of-sequence token
};

// "length", "stop", "eos"; "" for kUnspecified.
const char* FinishReasonName(FinishReason reason);

}  // namespace attn
