// The TorchScript methods of a package whose layers are whole blocks
// (rwkv7, rwkv4, mamba2; model/lm/torchscript_methods.h gives the contract):
// init_state, prefill, step and forward over the blocks of
// model/mixers/rwkv7.h, rwkv4.h and mamba2.h, in torch operations only, so
// that a package runs in PyTorch with nothing of this project installed and
// wherever the module is moved. The state list is the tokens each row has
// consumed, then per layer the block's state tensors in the order its
// header lists them. A step is a prefill of one token (the recurrences have
// no positions).
#pragma once

#include <string>

#include "model/lm/config.h"

namespace attn {

// The methods and their helpers for `config` (a whole-block mixer); they
// use the helpers every package has (_layernorm, _rmsnorm, _dense).
std::string WholeBlockTorchScriptMethods(const LmConfig& config);

}  // namespace attn
