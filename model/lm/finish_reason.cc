#include "model/lm/finish_reason.h"

namespace attn {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kUnspecified:
      break;
  }
  return "";
}

}  // namespace attn
