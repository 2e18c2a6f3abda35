#include "model/mixers/linear_attention.h"

#include <torch/torch.h>

#include <cmath>
#include <string>

#include "model/cuda/state_kernels.h"
#include "model/kernels/kernels.h"
#include "model/layers/dense.h"
#include "model/layers/heads.h"
#include "model/mixers/block_helpers.h"

namespace attn {

torch::Tensor LinearFeatureMap(const torch::Tensor& x, bool exp_feature) {
  if (exp_feature) return torch::exp(x - std::get<0>(x.max(-1, /*keepdim=*/true)));
  return torch::elu(x) + 1.0;
}

LinearAttentionImpl::LinearAttentionImpl(const MixerOptions& options)
    : SequenceMixer(options), head_dim_(options.d_model / options.heads) {
  TORCH_CHECK(options.kind == MixerKind::kLinearElu || options.kind == MixerKind::kLinearExp ||
                  options.kind == MixerKind::kLinearDecay,
              "LinearAttention needs kind linear-elu, linear-exp or linear-decay");
  TORCH_CHECK(options.d_model % options.heads == 0, "d_model (", options.d_model,
              ") must be divisible by heads (", options.heads, ")");
  in_proj_ = register_module("in_proj", torch::nn::Linear(options.d_model, 3 * options.d_model));
  out_proj_ = register_module("out_proj", torch::nn::Linear(options.d_model, options.d_model));
  if (decayed()) {
    // lambda = -log g from -log(1 - 2^-5) down to -log(1 - 2^-12), log-evenly.
    const double fast = -std::log1p(-std::pow(2.0, -5)), slow = -std::log1p(-std::pow(2.0, -12));
    auto f = torch::arange(options.heads, torch::kDouble) / std::max<int64_t>(1, options.heads - 1);
    auto lambda = torch::exp(std::log(fast) + f * (std::log(slow) - std::log(fast)));
    decay_logit_ =
        register_parameter("decay_logit", torch::log(torch::expm1(lambda)).to(torch::kFloat));
  }
}

torch::Tensor LinearAttentionImpl::decay_factor() const {
  return decayed() ? torch::exp(-torch::softplus(decay_logit_)) : torch::Tensor();
}

torch::Tensor LinearAttentionImpl::CausalBlocks(const torch::Tensor& q, const torch::Tensor& k,
                                                const torch::Tensor& v, torch::Tensor& s,
                                                torch::Tensor& z) const {
  const bool exp = exp_feature();
  auto phi_q = LinearFeatureMap(q, exp);
  auto phi_k = LinearFeatureMap(k, exp);
  const int64_t time = q.size(2);
  // lambda_h = -log g_h as [1, H, 1, 1]; g_h^n = exp(-lambda_h n).
  auto lambda =
      decayed() ? (-torch::log(decay_factor())).to(q.dtype()).view({1, -1, 1, 1}) : torch::Tensor();
  std::vector<torch::Tensor> outputs;
  for (int64_t start = 0; start < time; start += options_.chunk) {
    const int64_t len = std::min(options_.chunk, time - start);
    auto pq = phi_q.narrow(2, start, len);
    auto pk = phi_k.narrow(2, start, len);
    auto vv = v.narrow(2, start, len);
    auto within = torch::matmul(pq, pk.transpose(-2, -1)).tril();  // [B, H, c, c]
    auto carried_num = torch::matmul(pq, s);
    auto carried_den = (pq * z.unsqueeze(2)).sum(-1, /*keepdim=*/true);
    if (lambda.defined()) {
      auto i = torch::arange(len, q.options()).view({1, 1, len, 1});
      auto ages = (i - i.transpose(-2, -1)).clamp_min(0);  // i - j
      within = within * torch::exp(-lambda * ages);
      auto state_age = torch::exp(-lambda * (i + 1));  // [1, H, c, 1]
      carried_num = carried_num * state_age;
      carried_den = carried_den * state_age;
      auto key_age = torch::exp(-lambda * (len - 1 - i));
      pk = pk * key_age;  // for the state update below
      s = s * torch::exp(-lambda * static_cast<double>(len));
      z = z * torch::exp(-lambda * static_cast<double>(len)).squeeze(-1);
    }
    auto num = carried_num + torch::matmul(within, vv);
    auto den = carried_den.squeeze(-1) + within.sum(-1);
    outputs.push_back(num / (den + options_.linear_eps).unsqueeze(-1));
    s = s + torch::matmul(pk.transpose(-2, -1), vv);
    z = z + pk.sum(2);
  }
  return torch::cat(outputs, 2);
}

torch::Tensor LinearAttentionImpl::attend(const torch::Tensor& query, const torch::Tensor& key,
                                          const torch::Tensor& value,
                                          const torch::Tensor& key_padding_mask, bool causal) {
  TORCH_CHECK(causal || !decayed(),
              "linear-decay attends causally only (its decay is by position)");
  auto qkv = ProjectToHeads(in_proj_, query, key, value, options_.heads);
  if (causal) {
    TORCH_CHECK(query.size(1) == key.size(1), "causal linear attention needs Tq == Tk");
    TORCH_CHECK(!key_padding_mask.defined(), "causal linear attention takes no padding mask");
    auto s = torch::zeros({query.size(0), options_.heads, head_dim_, head_dim_}, query.options());
    auto z = torch::zeros({query.size(0), options_.heads, head_dim_}, query.options());
    return Dense(MergeHeads(CausalBlocks(qkv[0], qkv[1], qkv[2], s, z)), out_proj_);
  }
  auto phi_q = LinearFeatureMap(qkv[0], exp_feature());
  auto phi_k = LinearFeatureMap(qkv[1], exp_feature());
  if (key_padding_mask.defined()) {
    TORCH_CHECK(key_padding_mask.sizes() == torch::IntArrayRef({key.size(0), key.size(1)}),
                "key_padding_mask must be [batch, key_time]");
    phi_k = phi_k.masked_fill(key_padding_mask.view({key.size(0), 1, key.size(1), 1}), 0.0);
  }
  auto kv = torch::matmul(phi_k.transpose(-2, -1), qkv[2]);  // [B, H, Dh, Dh]
  auto z = phi_k.sum(2, /*keepdim=*/true);                   // [B, H, 1, Dh]
  auto num = torch::matmul(phi_q, kv);
  auto den = (phi_q * z).sum(-1, /*keepdim=*/true) + options_.linear_eps;
  return Dense(MergeHeads(num / den), out_proj_);
}

torch::Tensor LinearAttentionImpl::forward(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == 3 && x.size(2) == options_.d_model, "expected x [B, T, ", options_.d_model,
              "], got ", x.sizes());
  return attend(x, x, x, {}, /*causal=*/true);
}

MixerState LinearAttentionImpl::initial_state(int64_t rows, torch::Device device) const {
  auto opts = torch::TensorOptions().device(device).dtype(torch::kFloat);
  MixerState state;
  state.length = torch::zeros({rows}, opts.dtype(torch::kLong));
  state.tensors = {torch::zeros({rows, options_.heads, head_dim_, head_dim_}, opts),
                   torch::zeros({rows, options_.heads, head_dim_}, opts)};
  return state;
}

torch::Tensor LinearAttentionImpl::Prefill(const torch::Tensor& x, MixerState& state,
                                           const torch::Tensor& slots, int64_t keep) {
  auto rows = ResolveSlots(state, slots, x.size(0));
  if (CanFuse(x, state)) return FusedPrefill(x.contiguous(), state, rows, keep);
  auto index = RowsOn(rows, x.device());
  auto s = state.tensors[0].index_select(0, index);
  auto z = state.tensors[1].index_select(0, index);
  auto qkv = ProjectToHeads(in_proj_, x, x, x, options_.heads);
  auto y = CausalBlocks(qkv[0], qkv[1], qkv[2], s, z);
  state.tensors[0].index_copy_(0, index, s);
  state.tensors[1].index_copy_(0, index, z);
  AdvanceRows(state, rows, x.size(1));
  return Dense(MergeHeads(y.narrow(2, x.size(1) - keep, keep)), out_proj_);
}

void LinearAttentionImpl::FillHeadsArgs(int64_t batch, const int64_t* slots,
                                        const torch::Tensor& qkv, const torch::Tensor& decay,
                                        MixerState& state, kernels::LinearHeadsArgs* args) const {
  args->decay = decay.defined() ? decay.data_ptr<float>() : nullptr;
  args->batch = batch;
  args->heads = options_.heads;
  args->head_dim = head_dim_;
  args->exp_feature = exp_feature();
  args->eps = static_cast<float>(options_.linear_eps);
  args->slots = slots;
  args->q = qkv.data_ptr<float>();  // q, k, v side by side in the last dimension
  args->k = args->q + options_.d_model;
  args->v = args->q + 2 * options_.d_model;
  args->s = state.tensors[0].data_ptr<float>();
  args->z = state.tensors[1].data_ptr<float>();
}

torch::Tensor LinearAttentionImpl::FusedPrefill(const torch::Tensor& x, MixerState& state,
                                                const torch::Tensor& rows, int64_t keep) {
  const int64_t batch = x.size(0), time = x.size(1), d = options_.d_model;
  auto qkv = DenseLeadingColumnsForLast(x, in_proj_, d, keep).contiguous();  // [B, T, 3D]
  auto out = torch::empty({batch, keep, d}, x.options());
  auto decay = decayed() ? decay_factor().contiguous() : torch::Tensor();
  kernels::LinearPrefillArgs args;
  FillHeadsArgs(batch, rows.data_ptr<int64_t>(), qkv, decay, state, &args);
  args.time = time;
  args.block = options_.chunk;
  args.row_stride = time * 3 * d;
  args.token_stride = 3 * d;
  args.first_output = time - keep;
  args.out = out.data_ptr<float>();
  kernels::LinearAttentionPrefill(args);
  AdvanceRows(state, rows, time);
  return Dense(out, out_proj_);
}

torch::Tensor LinearAttentionImpl::step(const torch::Tensor& x, MixerState& state,
                                        const torch::Tensor& slots) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) == options_.d_model, "step expects x [B, ",
              options_.d_model, "], got ", x.sizes());
  const int64_t batch = x.size(0), d = options_.d_model;
  if (!CanFuse(x, state)) {
    const torch::Tensor rows = ResolveSlots(state, slots, batch);
    if (torch::Tensor y = StepOnGpu(x, state, rows); y.defined()) return y;
    // The state does not depend on position, so rows at different lengths
    // step together as one prefill of one token: one set of ops for the
    // batch, not one per row.
    return Prefill(x.unsqueeze(1), state, rows, 1).squeeze(1);
  }
  torch::Tensor slot_holder;
  const int64_t* slot_ids = PrepareFusedStep(state, slots, batch, &slot_holder);
  auto qkv = Dense(x, in_proj_).contiguous();
  auto out = torch::empty({batch, d}, x.options());
  auto decay = decayed() ? decay_factor().contiguous() : torch::Tensor();
  kernels::LinearStepArgs args;
  FillHeadsArgs(batch, slot_ids, qkv, decay, state, &args);
  args.stride = 3 * d;
  args.out = out.data_ptr<float>();
  kernels::LinearAttentionStep(args);
  kernels::AdvanceLengths(batch, args.slots, state.length.data_ptr<int64_t>());
  return Dense(out, out_proj_);
}

torch::Tensor LinearAttentionImpl::StepOnGpu(const torch::Tensor& x, MixerState& state,
                                             const torch::Tensor& rows) {
  if (head_dim_ > cuda::kMaxLinearHeadDim || !CudaPoolStepApplies(x, state)) return {};
  const int64_t batch = x.size(0), d = options_.d_model;
  const auto qkv = Dense(x, in_proj_).contiguous();
  const auto decay = decayed() ? decay_factor().contiguous() : torch::Tensor();
  const auto slots = RowsOn(rows, x.device());
  auto out = torch::empty({batch, d}, x.options());
  cuda::LinearStepArgs args;
  args.batch = batch;
  args.heads = options_.heads;
  args.head_dim = head_dim_;
  args.exp_feature = exp_feature();
  args.eps = static_cast<float>(options_.linear_eps);
  args.qkv = qkv.data_ptr<float>();
  args.decay = decay.defined() ? decay.data_ptr<float>() : nullptr;
  args.slots = slots.data_ptr<int64_t>();
  args.s = state.tensors[0].data_ptr<float>();
  args.z = state.tensors[1].data_ptr<float>();
  args.out = out.data_ptr<float>();
  RunPoolStep(state, slots, "linear attention",
              [&](void* stream) { return cuda::LinearStep(args, stream); });
  return Dense(out, out_proj_);
}

int64_t LinearAttentionImpl::state_bytes_per_sequence(int64_t /*context*/) const {
  return (options_.heads * head_dim_ * (head_dim_ + 1)) * static_cast<int64_t>(sizeof(float)) +
         static_cast<int64_t>(sizeof(int64_t));
}

}  // namespace attn
