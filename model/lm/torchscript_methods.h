// TorchScript methods that make a model package a runnable program: compiled
// from C++ with torch::jit::Module::define into the package, they run in any
// LibTorch or PyTorch (torch.jit.load) with nothing of this project present.
//
//   forward(tokens: int64 [B, T]) -> float [B, T, V]
//       logits of the parallel form: prefill() from init_state(B);
//   init_state(batch: int) -> List[Tensor]
//       `batch` empty sequences; dim 0 of every tensor indexes a sequence.
//       Element 0 is the tokens each row has consumed (int64 [B]); the rest
//       are the mixers' tensors, layer by layer, as in MixerState, except
//       that AFT's ring of the last S keys is in age order (oldest first,
//       zeros before the sequence's first key) instead of slot order: a
//       step then shifts it instead of gathering each row's slot, and its
//       bias factors are the same for every row (aft-conv, aft-simple;
//       aft-decay keeps raw keys and values in its ring, also oldest first);
//   prefill(tokens [B, T], state) -> (logits [B, T, V], state)
//       continues rows that are all at the same length (blocks of the
//       parallel form);
//   step(tokens [B], state) -> (logits [B, V], state)
//       one token per row, each row at its own length (the recurrence).
//
// prefill and step update the state tensors in place and return them. The
// methods use torch operations only, so they run wherever the module is
// moved (module.to("cuda")). They compute the equations of the mixers'
// headers in their op-by-op form; the C++ model's fused kernels agree with
// them to float precision (tests/torchscript_export_test.cc).
//
// The package stores each tensor of the model as a buffer named after its
// C++ name with '.' replaced by '_' ("layers_0_mixer_in_proj_weight"), since
// TorchScript attribute names cannot contain dots.
#pragma once

#include <string>
#include <vector>

#include "model/lm/config.h"

namespace torch::jit {
struct Module;
}  // namespace torch::jit

namespace attn {

// Whether the methods cover a model of `config`: every kind and hybrid
// (LFM2's short-conv and gqa layers, Granite 4.0-H's Mamba-2 blocks with
// their feed-forwards and experts, and gqa layers) but relative, whose
// segment memory has no TorchScript form yet. Such packages hold weights
// only: the native backend serves them.
bool HasTorchScriptMethods(const LmConfig& config);

// The buffer name of the model tensor `name` ("layers.0.ff.up.weight").
std::string ScriptTensorName(const std::string& name);

// The buffer name of the float32 scales [out] of the int8 buffer
// `script_name` (an int8 package's dense weight [out, in]).
std::string Int8ScaleName(const std::string& script_name);

// The TorchScript source of the four methods and their helpers for a model
// with `config`. `int8_names` are the buffers stored as int8 values with
// scales (Int8ScaleName): the methods read them dequantised, values times
// scale per output channel, so they compute the float model's equations.
std::string TorchScriptSource(const LmConfig& config,
                              const std::vector<std::string>& int8_names = {});

// Compiles TorchScriptSource(config, int8_names) into `module`, which must
// hold the model's tensors under their ScriptTensorName. Throws c10::Error
// if the source does not compile (a bug, never an input error).
void DefineTorchScriptMethods(torch::jit::Module& module, const LmConfig& config,
                              const std::vector<std::string>& int8_names = {});

}  // namespace attn
