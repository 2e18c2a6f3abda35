#include "model/checkpoints/tensor_mapping.h"

#include <torch/torch.h>

#include <sstream>

#include "absl/strings/str_cat.h"

namespace attn {
namespace {

// Copies `source` into `target` after the shape check `transform` implies.
absl::Status CopyInto(const std::string& ours, const Source& source, const torch::Tensor& from,
                      torch::Tensor& target) {
  torch::Tensor value = from;
  if (source.transform == Transform::kTranspose && from.dim() == 2) value = from.t();
  if (source.transform == Transform::kVector && from.numel() == target.numel() &&
      from.size(-1) == target.numel()) {
    value = from.reshape({-1});
  }
  if (value.sizes() != target.sizes()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", source.name, " has shape ",
                                                   ShapeText(from), "; ", ours, " needs ",
                                                   ShapeText(target)));
  }
  target.copy_(source.scale == 1.0 ? value : value.to(torch::kDouble) * source.scale);
  return absl::OkStatus();
}

}  // namespace

std::string ShapeText(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

absl::Status FuseQkvProjections(const LmConfig& config, double query_scale, TensorMap& tensors) {
  const int64_t heads = config.gqa_heads(), head = config.d_model / heads;
  const int64_t kv = (config.kv_heads > 0 ? config.kv_heads : heads) * head;
  for (int64_t l = 0; l < config.layers; ++l) {
    if (config.layer_mixer(l) != MixerKind::kGqa) continue;
    const std::string at = absl::StrCat("model.layers.", l, ".self_attn.");
    std::vector<torch::Tensor> parts;
    for (auto [name, rows] : {std::pair<const char*, int64_t>{"q_proj", config.d_model},
                              {"k_proj", kv},
                              {"v_proj", kv}}) {
      const std::string key = absl::StrCat(at, name, ".weight");
      const torch::Tensor* t = FindTensor(tensors, key);
      if (t == nullptr) return absl::InvalidArgumentError("missing tensor " + key);
      if (t->dim() != 2 || t->size(0) != rows || t->size(1) != config.d_model) {
        return absl::InvalidArgumentError(absl::StrCat("tensor ", key, " has shape ", ShapeText(*t),
                                                       "; expected [", rows, ", ", config.d_model,
                                                       "]"));
      }
      parts.push_back(parts.empty() && query_scale != 1.0
                          ? (t->to(torch::kDouble) * query_scale).to(torch::kFloat)
                          : t->to(torch::kFloat));
      tensors.erase(key);
    }
    tensors[at + "qkv_proj.weight"] = torch::cat(parts, 0);
  }
  return absl::OkStatus();
}

const torch::Tensor* FindTensor(const TensorMap& tensors, const std::string& name) {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

absl::StatusOr<int64_t> TensorSize(const TensorMap& tensors, const std::string& name, int64_t dims,
                                   int64_t dim) {
  const torch::Tensor* t = FindTensor(tensors, name);
  if (t == nullptr) return absl::InvalidArgumentError(absl::StrCat("missing tensor ", name));
  if (t->dim() != dims) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", name, " has shape ", ShapeText(*t), "; expected ", dims, " dims"));
  }
  return t->size(dim);
}

absl::StatusOr<CausalLm> BuildModel(const LmConfig& config, const Mapping& mapping,
                                    const TensorMap& tensors) {
  std::set<std::string> used = mapping.may_skip;
  try {
    CausalLm model(config);
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters()) {
      if (mapping.preset && mapping.preset(p.key(), p.value())) continue;
      auto source = mapping.sources.find(p.key());
      if (source == mapping.sources.end()) {
        return absl::InternalError(absl::StrCat("no checkpoint name for parameter ", p.key()));
      }
      const torch::Tensor* from = FindTensor(tensors, source->second.name);
      if (from == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("missing tensor ", source->second.name));
      }
      if (absl::Status copied = CopyInto(p.key(), source->second, *from, p.value()); !copied.ok()) {
        return copied;
      }
      used.insert(source->second.name);
    }
    for (const auto& [name, tensor] : tensors) {
      if (!used.count(name)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", name, " is not part of ", mapping.model_name, " of these sizes (",
            config.layers, " layers, width ", config.d_model, ")"));
      }
    }
    model->eval();
    return model;
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(e.what_without_backtrace());
  }
}

}  // namespace attn
