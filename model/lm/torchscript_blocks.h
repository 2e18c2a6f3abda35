// The TorchScript methods of a package whose layers are whole blocks
// (rwkv7, rwkv4, mamba2) or of a hybrid whose layers differ in kind (LFM2:
// short-conv and gqa layers; Granite 4.0-H: Mamba-2 blocks, each with a
// feed-forward and optionally top-k experts after it, and gqa layers; also
// a model of gqa layers only).
// model/lm/torchscript_methods.h gives the contract: init_state, prefill,
// step and forward over the blocks of model/mixers/rwkv7.h, rwkv4.h,
// mamba2.h, short_conv.h and grouped_attention.h, in torch operations only,
// so that a package runs in PyTorch with nothing of this project installed
// and wherever the module is moved. The state list is the tokens each row
// has consumed, then per layer its state tensors in the order its header
// lists them (a gqa layer's: keys and values [B, KV, max_context, Dh], keys
// rotated). A step is a prefill of one token whose rows may be at different
// lengths: the recurrences have no positions, and attention places each
// row's token at its own.
#pragma once

#include <string>

#include "model/lm/config.h"

namespace attn {

// Whether `config`'s methods are the ones below: a whole-block kind, or
// some layer short-conv or gqa.
bool HasBlockTorchScriptMethods(const LmConfig& config);

// Whether the methods below cover `config` (HasBlockTorchScriptMethods
// given): not when its norms are LayerNorms of an eps other than 1e-5, nor
// when a layer that is not a whole block has norms other than RMSNorm or
// position embeddings.
bool BlockTorchScriptMethodsCover(const LmConfig& config);

// `value` as a TorchScript float literal that reads back as the same double
// ("1e-05", "10000.0"; an integer literal would not pass as a float).
std::string ScriptFloat(double value);

// The methods and their helpers for `config`; they use the helpers every
// package has (_layernorm, _rmsnorm, _dense, _feed_forward, _check_context).
std::string BlockTorchScriptMethods(const LmConfig& config);

}  // namespace attn
