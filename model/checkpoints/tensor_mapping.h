// Filling a model's parameters from a checkpoint's tensors by name: the
// step every importer (rwkv7_checkpoint.h, hf_checkpoint.h) ends with. Every
// parameter needs a source, every source must exist with the shape the
// parameter has, and no checkpoint tensor may be left over; errors name
// the tensor.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "model/checkpoints/torch_checkpoint.h"
#include "model/lm/language_model.h"

namespace attn {

// How a checkpoint tensor becomes one of the model's.
enum class Transform {
  kSame,       // the same shape
  kVector,     // [1, 1, C] or [C] into [C]
  kTranspose,  // a matrix stored [in, out] for the model's [out, in]
};

struct Source {
  std::string name;
  Transform transform = Transform::kSame;
  double scale = 1.0;  // the value times this (RWKV-4's rescaled weights)
};

std::string ShapeText(const torch::Tensor& t);
const torch::Tensor* FindTensor(const TensorMap& tensors, const std::string& name);
// A tensor's size in dim `dim` of `dims`, or an error naming it.
absl::StatusOr<int64_t> TensorSize(const TensorMap& tensors, const std::string& name, int64_t dims,
                                   int64_t dim);

struct Mapping {
  std::map<std::string, Source> sources;  // by the model's parameter name
  // Checkpoint tensors that may go unused (a tied head's copy, ...).
  std::set<std::string> may_skip;
  // Sets a parameter that has no checkpoint tensor; returns whether it did.
  std::function<bool(const std::string& parameter, torch::Tensor& value)> preset;
  std::string model_name;  // "an RWKV-7 model", for the leftover message
};

// Fuses each gqa layer's q_proj, k_proj and v_proj (transformers' names,
// "model.layers.N.self_attn.*.weight") into the one qkv_proj.weight the gqa
// mixer holds, under a name of their own there; the query rows times
// `query_scale`. kInvalidArgument naming a missing or misshaped tensor.
absl::Status FuseQkvProjections(const LmConfig& config, double query_scale, TensorMap& tensors);

// A model of `config` with every parameter taken from `tensors` (eval
// mode); kInvalidArgument naming the missing, misshaped or leftover tensor.
absl::StatusOr<CausalLm> BuildModel(const LmConfig& config, const Mapping& mapping,
                                    const TensorMap& tensors);

}  // namespace attn
