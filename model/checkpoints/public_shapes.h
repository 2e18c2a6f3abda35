// The shapes of public RWKV-7 and Mamba-2 checkpoints, for benchmarks that
// build them with random weights (their weights cannot be downloaded where
// the benchmarks run, and a 7.2B model's file would not travel):
//
//   rwkv7-0.1b  rwkv7-0.4b  rwkv7-1.5b  rwkv7-2.9b  rwkv7-7.2b
//     BlinkDL's RWKV-7 "x070" models (L12-D768, L24-D1024, L24-D2048,
//     L32-D2560, L32-D4096): heads of 64 channels, a feed-forward of 4 D,
//     the low-rank sizes of DefaultRwkv7Ranks(D), vocabulary 65,536, an
//     untied head. The config is the one the RWKV-7 importer
//     (rwkv7_checkpoint.h) reads from such a checkpoint's tensors.
//   mamba2-130m  mamba2-370m  mamba2-780m  mamba2-1.3b  mamba2-2.7b
//     state-spaces' Mamba-2 models (mamba_ssm's config.json: d_model 768,
//     1024, 1536, 2048, 2560; n_layer 24, 48, 48, 48, 64; ssm_cfg
//     {"layer": "Mamba2"}, whose defaults are d_state 128, headdim 64,
//     expand 2, one group), parsed by ParseHfModelSpec as the importer
//     parses the real file, with the vocabulary padded as mamba_ssm pads it
//     (50,277 to a multiple of 16: 50,288) and the embedding tied.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/lm/config.h"

namespace attn {

// Every shape's name, RWKV-7's then Mamba-2's, smallest first.
std::vector<std::string> PublicShapeNames();

// The config of shape `name`; kInvalidArgument listing the names for any
// other.
absl::StatusOr<LmConfig> PublicShapeConfig(absl::string_view name);

}  // namespace attn
