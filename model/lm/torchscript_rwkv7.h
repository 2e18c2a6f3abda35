// The TorchScript methods of an rwkv7 model package
// (model/lm/torchscript_methods.h gives the contract): init_state, prefill,
// step and forward over the RWKV-7 blocks of model/mixers/rwkv7.h, in torch
// operations only, so that a package runs in PyTorch with nothing of this
// project installed and wherever the module is moved. The state list is the
// tokens each row has consumed, then per layer att_shift [B, C], S
// [B, H, N, N] and ffn_shift [B, C]. A step is a prefill of one token (the
// recurrence has no positions).
#pragma once

#include <string>

#include "model/lm/config.h"

namespace attn {

// The methods and their helpers for `config` (mixer rwkv7); they use the
// helpers every package has (_layernorm, _dense).
std::string Rwkv7TorchScriptMethods(const LmConfig& config);

}  // namespace attn
