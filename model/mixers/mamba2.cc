#include "model/mixers/mamba2.h"

#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/cuda/state_kernels.h"
#include "model/kernels/kernels.h"
#include "model/layers/dense.h"
#include "model/mixers/block_helpers.h"

namespace attn {

// The tensors one call continues: a copy of the rows' convolution windows,
// and their S, in place in the pool (the fused update, rows by `ids`) or as
// this call's copy.
// The state's tensors, in order: the convolution's last inputs
// [B, W - 1, channels], the scan's matrices (the pool's [rows, H, P, N]
// when updated in place, else [B, H, P, N]).
enum : size_t { kConv, kSsm };

struct Mamba2Impl::Scan {
  torch::Tensor x;   // [B, T, H, P]
  torch::Tensor b;   // [B, T, G, N]
  torch::Tensor c;   // [B, T, G, N]
  torch::Tensor dt;  // [B, T, H], after softplus
};

Mamba2Impl::Mamba2Impl(const MixerOptions& options) : WholeBlockMixer(options) {
  TORCH_CHECK(options.kind == MixerKind::kMamba2, "Mamba2 needs kind mamba2");
  const Mamba2Sizes& m = options.mamba2;
  TORCH_CHECK(m.state_size > 0 && m.expand > 0 && m.groups > 0,
              "mamba2: state_size, expand and groups must be positive");
  TORCH_CHECK(m.conv_kernel >= 2, "mamba2: conv_kernel must be at least 2");
  const int64_t d = options.d_model, heads = options.heads;
  TORCH_CHECK(inner() % heads == 0, "mamba2: heads (", heads, ") must divide the inner width (",
              inner(), ")");
  TORCH_CHECK(heads % m.groups == 0, "mamba2: groups (", m.groups, ") must divide heads (", heads,
              ")");
  const int64_t channels = conv_channels();
  in_proj_ = register_module(
      "in_proj",
      torch::nn::Linear(torch::nn::LinearOptions(d, inner() + channels + heads).bias(false)));
  out_proj_ = register_module("out_proj",
                              torch::nn::Linear(torch::nn::LinearOptions(inner(), d).bias(false)));
  const double bound = 1.0 / std::sqrt(static_cast<double>(m.conv_kernel));
  conv_weight_ = register_parameter(
      "conv_weight", torch::empty({channels, 1, m.conv_kernel}).uniform_(-bound, bound));
  conv_bias_ = register_parameter("conv_bias", torch::empty({channels}).uniform_(-bound, bound));
  // The reference initialisation: dt spread log-uniformly over [1e-3, 0.1]
  // (dt_bias its softplus inverse), A uniform in [1, 16], D one.
  const auto dt =
      torch::exp(torch::rand({heads}) * (std::log(0.1) - std::log(1e-3)) + std::log(1e-3));
  dt_bias_ = register_parameter("dt_bias", dt + torch::log(-torch::expm1(-dt)));
  a_log_ = register_parameter("a_log", torch::log(torch::empty({heads}).uniform_(1.0, 16.0)));
  skip_ = register_parameter("skip", torch::ones({heads}));
  out_norm_weight_ = register_parameter("out_norm_weight", torch::ones({inner()}));
  norm_ = register_module("norm", Norm(NormKind::kRmsNorm, d, options.norm_eps));
  torch::NoGradGuard no_grad;
  out_proj_->weight.zero_();  // a new block passes its input through
}

int64_t Mamba2Impl::conv_channels() const {
  return inner() + 2 * options_.mamba2.groups * options_.mamba2.state_size;
}

int64_t Mamba2Impl::state_bytes_per_sequence(int64_t /*context*/) const {
  const int64_t floats =
      (options_.mamba2.conv_kernel - 1) * conv_channels() + inner() * options_.mamba2.state_size;
  return floats * static_cast<int64_t>(sizeof(float)) + static_cast<int64_t>(sizeof(int64_t));
}

MixerState Mamba2Impl::initial_state(int64_t rows, torch::Device device) const {
  const auto opts = torch::TensorOptions().dtype(torch::kFloat).device(device);
  MixerState state;
  state.length = torch::zeros({rows}, opts.dtype(torch::kLong));
  state.tensors = {
      torch::zeros({rows, options_.mamba2.conv_kernel - 1, conv_channels()}, opts),
      torch::zeros({rows, options_.heads, head_dim(), options_.mamba2.state_size}, opts)};
  return state;
}

torch::Tensor Mamba2Impl::Convolve(const torch::Tensor& xbc, torch::Tensor& window) const {
  const int64_t time = xbc.size(1), width = options_.mamba2.conv_kernel;
  const auto inputs = torch::cat({window, xbc}, 1);  // [B, W - 1 + T, channels]
  auto out = conv_bias_.expand_as(xbc).clone();
  const auto weight = conv_weight_.squeeze(1);  // [channels, W]
  for (int64_t j = 0; j < width; ++j) {
    out = torch::addcmul(out, inputs.narrow(1, j, time), weight.select(1, j));
  }
  window = inputs.narrow(1, time, width - 1).clone();
  return torch::silu(out);
}

torch::Tensor Mamba2Impl::ScanByOps(const Scan& scan, torch::Tensor& ssm, int64_t keep) const {
  const int64_t batch = scan.x.size(0), time = scan.x.size(1), heads = options_.heads;
  const int64_t groups = options_.mamba2.groups;
  if (time == 1 && keep == 1) {
    if (torch::Tensor y = ScanStepOnGpu(scan, ssm); y.defined()) return y;
  }
  // Each head's group: B and C repeated over the heads of a group.
  auto per_head = [&](const torch::Tensor& t) {
    return t.repeat_interleave(heads / groups, 2);  // [B, T, H, N]
  };
  const auto b = per_head(scan.b), c = per_head(scan.c);
  const auto a = -torch::exp(a_log_);
  std::vector<torch::Tensor> outputs;
  for (int64_t t = 0; t < time; ++t) {
    const auto dt = scan.dt.select(1, t);  // [B, H]
    const auto x = scan.x.select(1, t);    // [B, H, P]
    const auto decay = torch::exp(dt * a).view({batch, heads, 1, 1});
    ssm = ssm * decay + (x * dt.unsqueeze(-1)).unsqueeze(-1) * b.select(1, t).unsqueeze(2);
    if (t >= time - keep) {
      const auto y = torch::matmul(ssm, c.select(1, t).unsqueeze(-1)).squeeze(-1);
      outputs.push_back(y + x * skip_.view({1, heads, 1}));
    }
  }
  if (outputs.empty()) return torch::empty({batch, 0, inner()}, scan.x.options());
  return torch::stack(outputs, 1).view({batch, keep, inner()});
}

torch::Tensor Mamba2Impl::ScanStepOnGpu(const Scan& scan, torch::Tensor& ssm) const {
  if (!CudaStepApplies({&scan.x, &scan.b, &scan.c, &scan.dt, &ssm, &a_log_, &skip_})) return {};
  const auto x = scan.x.contiguous(), b = scan.b.contiguous(), c = scan.c.contiguous();
  const auto dt = scan.dt.contiguous(), s_in = ssm.contiguous();
  auto s_out = torch::empty_like(s_in);
  cuda::Mamba2StepArgs args;  // packed inputs, dt after softplus
  args.x = x.data_ptr<float>();
  args.b = b.data_ptr<float>();
  args.c = c.data_ptr<float>();
  args.dt = dt.data_ptr<float>();
  torch::Tensor y = LaunchStep(args, x.size(0), s_in, s_out, torch::Tensor());
  ssm = s_out;
  return y;
}

torch::Tensor Mamba2Impl::StepPoolRowsOnGpu(const torch::Tensor& xbc,
                                            const torch::Tensor& projected, BlockRows& rows) const {
  TORCH_CHECK(
      CudaStepApplies({&xbc, &projected}) && xbc.is_contiguous() && projected.is_contiguous(),
      "mamba2: a step on the pool's rows needs the CUDA kernel's inputs, got ", xbc.scalar_type(),
      " on ", xbc.device());
  const int64_t groups = options_.mamba2.groups, n = options_.mamba2.state_size;
  cuda::Mamba2StepArgs args;  // read in place from the convolution's and the projection's rows
  args.x = xbc.data_ptr<float>();
  args.b = args.x + inner();
  args.c = args.b + groups * n;
  args.x_stride = args.bc_stride = xbc.size(2);
  args.dt = projected.data_ptr<float>() + inner() + conv_channels();
  args.dt_stride = projected.size(2);
  args.dt_bias = dt_bias_.data_ptr<float>();
  torch::Tensor& pool = rows.tensors[kSsm];
  return LaunchStep(args, xbc.size(0), pool, pool, rows.device_ids);
}

torch::Tensor Mamba2Impl::LaunchStep(cuda::Mamba2StepArgs args, int64_t batch,
                                     const torch::Tensor& s_in, const torch::Tensor& s_out,
                                     const torch::Tensor& slots) const {
  TORCH_CHECK(a_log_.is_contiguous() && skip_.is_contiguous() && dt_bias_.is_contiguous(),
              "mamba2: the CUDA step needs contiguous parameters");
  auto y = torch::empty({batch, 1, inner()}, s_in.options());
  args.batch = batch;
  args.heads = options_.heads;
  args.head_dim = head_dim();
  args.state_size = options_.mamba2.state_size;
  args.groups = options_.mamba2.groups;
  args.a_log = a_log_.data_ptr<float>();
  args.d = skip_.data_ptr<float>();
  args.s_in = s_in.data_ptr<float>();
  args.s_out = s_out.data_ptr<float>();
  args.slots = slots.defined() ? slots.data_ptr<int64_t>() : nullptr;
  args.y = y.data_ptr<float>();
  RunOnGpu(s_in.device(), "mamba2's step",
           [&](void* stream) { return cuda::Mamba2Step(args, stream); });
  return y;
}

namespace {

// t [B, T, ...] followed by `extra` zero tokens.
torch::Tensor PadTime(const torch::Tensor& t, int64_t extra) {
  if (extra == 0) return t;
  std::vector<int64_t> shape = t.sizes().vec();
  shape[1] = extra;
  return torch::cat({t, torch::zeros(shape, t.options())}, 1);
}

// t [B, K * Q, G, R, ...] as [B, G, R, K, Q, ...]: the chunk's tokens
// innermost but for the per-token vector.
torch::Tensor ByChunks(const torch::Tensor& t, int64_t chunks, int64_t q) {
  std::vector<int64_t> shape = t.sizes().vec();
  shape[1] = q;
  shape.insert(shape.begin() + 1, chunks);  // [B, K, Q, G, R, ...]
  std::vector<int64_t> order = {0, 3, 4, 1, 2};
  for (int64_t d = 5; d < static_cast<int64_t>(shape.size()); ++d) order.push_back(d);
  return t.reshape(shape).permute(order);
}

}  // namespace

torch::Tensor Mamba2Impl::ScanChunked(const Scan& scan, torch::Tensor& ssm, int64_t keep) const {
  const int64_t batch = scan.x.size(0), time = scan.x.size(1), heads = options_.heads;
  const int64_t p = head_dim(), n = options_.mamba2.state_size, g = options_.mamba2.groups;
  const int64_t r = heads / g;  // heads per group
  const int64_t q = std::min(options_.chunk, time), chunks = (time + q - 1) / q;
  // Padding tokens have dt 0: they neither decay the state nor add to it.
  const int64_t extra = chunks * q - time;
  const auto dt = PadTime(scan.dt, extra).view({batch, chunks * q, g, r});
  const auto a = ByChunks(dt * (-torch::exp(a_log_)).view({g, r}), chunks, q);  // [B,G,R,K,Q]
  const auto dtx = ByChunks(
      PadTime(scan.x, extra).view({batch, chunks * q, g, r, p}) * dt.unsqueeze(-1), chunks, q);
  // B and C shared by a group's heads: [B, G, 1, K, Q, N].
  const auto b = ByChunks(PadTime(scan.b, extra).unsqueeze(3), chunks, q);
  const auto c = ByChunks(PadTime(scan.c, extra).unsqueeze(3), chunks, q);
  // seg[i][j] = a_{j+1} + ... + a_i for j <= i: summed over the segment
  // itself, not as a difference of prefix sums, which cancels badly once
  // the prefix is large and the segment is not.
  const auto opts = torch::TensorOptions().dtype(torch::kBool).device(a.device());
  const auto below = torch::ones({q, q}, opts).tril(-1), causal = torch::ones({q, q}, opts).tril();
  const auto seg = a.unsqueeze(-1)
                       .expand({batch, g, r, chunks, q, q})
                       .masked_fill(below.logical_not(), 0.0)
                       .cumsum(-2);
  const auto within = torch::exp(seg.masked_fill(causal.logical_not(), -INFINITY));
  // Inside each chunk: y_i = sum_{j <= i} e^{seg[i][j]} (C_i . B_j) dt_j x_j.
  auto y = torch::matmul(within * torch::matmul(c, b.transpose(-1, -2)), dtx);
  // What each chunk adds to the state at its end, and the decay over it.
  const auto to_end = within.select(-2, q - 1).unsqueeze(-1);             // [B,G,R,K,Q,1]
  const auto added = torch::matmul((dtx * to_end).transpose(-1, -2), b);  // [B,G,R,K,P,N]
  const auto from_start = torch::exp(a.cumsum(-1));                       // [B,G,R,K,Q]
  const auto over_chunk = from_start.select(-1, q - 1);                   // [B,G,R,K]
  // The state entering each chunk, carried chunk to chunk.
  auto state = ssm.view({batch, g, r, p, n});
  std::vector<torch::Tensor> entering;
  for (int64_t k = 0; k < chunks; ++k) {
    entering.push_back(state);
    state = state * over_chunk.select(-1, k).unsqueeze(-1).unsqueeze(-1) + added.select(3, k);
  }
  ssm = state.reshape({batch, heads, p, n});
  // From the state before the chunk: y_i += e^{a_0 + ... + a_i} S C_i.
  const auto past = torch::matmul(c, torch::stack(entering, 3).transpose(-1, -2));
  y = y + past * from_start.unsqueeze(-1);
  // [B, G, R, K, Q, P] back to tokens, the skip term, the last `keep`.
  y = y.permute({0, 3, 4, 1, 2, 5}).reshape({batch, chunks * q, heads, p}).narrow(1, 0, time);
  y = y + scan.x * skip_.view({1, 1, heads, 1});
  return y.narrow(1, time - keep, keep).reshape({batch, keep, inner()});
}

torch::Tensor Mamba2Impl::ScanFused(const torch::Tensor& projected, BlockRows& rows,
                                    int64_t keep) const {
  const int64_t batch = projected.size(0), time = projected.size(1), heads = options_.heads;
  const int64_t channels = conv_channels(), n = options_.mamba2.state_size;
  const int64_t stride = projected.size(2);
  const auto window = rows.tensors[kConv].contiguous();
  torch::Tensor xbc;
  kernels::CausalConvSilu(ConvArgs(projected, window, xbc, rows.tensors[kConv]));

  const auto y = torch::empty({batch, keep, inner()}, projected.options());
  const auto dt_bias = dt_bias_.contiguous(), a_log = a_log_.contiguous(), d = skip_.contiguous();
  kernels::Mamba2ScanArgs args;
  args.batch = batch;
  args.time = time;
  args.heads = heads;
  args.head_dim = head_dim();
  args.state_size = n;
  args.groups = options_.mamba2.groups;
  args.first_output = time - keep;
  args.xbc_stride = channels;
  args.dt_stride = stride;
  args.slots = rows.ids;
  args.x = xbc.data_ptr<float>();
  args.b = args.x + inner();
  args.c = args.b + args.groups * n;
  args.dt = projected.data_ptr<float>() + inner() + channels;
  args.dt_bias = dt_bias.data_ptr<float>();
  args.a_log = a_log.data_ptr<float>();
  args.d = d.data_ptr<float>();
  args.s = rows.tensors[kSsm].data_ptr<float>();
  args.out = y.data_ptr<float>();
  kernels::Mamba2Scan(args);
  return y;
}

kernels::CausalConvArgs Mamba2Impl::ConvArgs(const torch::Tensor& projected,
                                             const torch::Tensor& window, torch::Tensor& xbc,
                                             torch::Tensor& window_out) const {
  TORCH_CHECK(conv_weight_.is_contiguous() && conv_bias_.is_contiguous(),
              "mamba2: the convolution kernels need contiguous parameters");
  const int64_t batch = projected.size(0), time = projected.size(1);
  xbc = torch::empty({batch, time, conv_channels()}, projected.options());
  window_out = torch::empty_like(window);
  kernels::CausalConvArgs conv;
  conv.batch = batch;
  conv.time = time;
  conv.channels = conv_channels();
  conv.width = options_.mamba2.conv_kernel;
  conv.in_stride = projected.size(2);
  conv.in = projected.data_ptr<float>() + inner();
  conv.window = window.data_ptr<float>();
  conv.weight = conv_weight_.data_ptr<float>();
  conv.bias = conv_bias_.data_ptr<float>();
  conv.out = xbc.data_ptr<float>();
  conv.window_out = window_out.data_ptr<float>();
  return conv;
}

torch::Tensor Mamba2Impl::ConvolveOnGpu(const torch::Tensor& projected,
                                        torch::Tensor& window) const {
  const auto window_in = window.contiguous();
  torch::Tensor xbc;
  const kernels::CausalConvArgs args = ConvArgs(projected, window_in, xbc, window);
  RunOnGpu(projected.device(), "mamba2's convolution",
           [&](void* stream) { return cuda::CausalConvSilu(args, stream); });
  return xbc;
}

Elementwise Mamba2Impl::ElementwiseFor(const torch::Tensor& projected,
                                       const BlockRows& rows) const {
  if (rows.fused()) return Elementwise::kCpu;
  const bool gpu = CudaStepApplies(
      {&projected, &rows.tensors[kConv], &conv_weight_, &conv_bias_, &out_norm_weight_});
  return gpu && projected.is_contiguous() ? Elementwise::kGpu : Elementwise::kOps;
}

torch::Tensor Mamba2Impl::GatedNorm(const torch::Tensor& y, const torch::Tensor& projected,
                                    Elementwise how) const {
  const int64_t batch = y.size(0), keep = y.size(1), time = projected.size(1);
  const int64_t groups = options_.mamba2.groups;
  if (how == Elementwise::kOps) {
    const auto z = projected.narrow(1, time - keep, keep).narrow(2, 0, inner());
    const auto gated = (y * torch::silu(z)).view({batch, keep, groups, inner() / groups});
    const auto normed = gated * torch::rsqrt(gated.square().mean(-1, true) + options_.norm_eps);
    return normed.view({batch, keep, inner()}) * out_norm_weight_;
  }
  // Rows of z: the projection's tokens time - keep .. time - 1 of each row,
  // which are evenly spaced only for one row or a whole chunk.
  const auto z = keep == time ? projected : projected.narrow(1, time - keep, keep).contiguous();
  const auto y_in = y.contiguous(), gain = out_norm_weight_.contiguous();
  auto out = torch::empty_like(y_in);
  cuda::GatedRmsNormArgs a;
  a.rows = batch * keep;
  a.d = inner();
  a.groups = groups;
  a.z_stride = z.size(2);
  a.y = y_in.data_ptr<float>();
  a.z = z.data_ptr<float>();
  a.gain = gain.data_ptr<float>();
  a.eps = static_cast<float>(options_.norm_eps);
  a.out = out.data_ptr<float>();
  if (how == Elementwise::kCpu) {
    kernels::GatedRmsNormRows(a.rows, a.d, a.groups, a.y, a.z, a.z_stride, a.gain, a.eps, a.out);
  } else {
    RunOnGpu(y.device(), "mamba2's gated norm",
             [&](void* stream) { return cuda::GatedRmsNorm(a, stream); });
  }
  return out;
}

torch::Tensor Mamba2Impl::ConvolveAndScan(const torch::Tensor& projected, BlockRows& rows,
                                          int64_t keep, Elementwise how) const {
  if (rows.fused()) return ScanFused(projected, rows, keep);
  const int64_t batch = projected.size(0), time = projected.size(1), heads = options_.heads;
  const int64_t groups = options_.mamba2.groups, n = options_.mamba2.state_size, p = head_dim();
  const int64_t channels = conv_channels();
  const auto xbc = how == Elementwise::kGpu
                       ? ConvolveOnGpu(projected, rows.tensors[kConv])
                       : Convolve(projected.narrow(2, inner(), channels), rows.tensors[kConv]);
  if (rows.gpu_step()) return StepPoolRowsOnGpu(xbc, projected, rows);
  Scan scan;
  scan.x = xbc.narrow(2, 0, inner()).reshape({batch, time, heads, p});
  scan.b = xbc.narrow(2, inner(), groups * n).reshape({batch, time, groups, n});
  scan.c = xbc.narrow(2, inner() + groups * n, groups * n).reshape({batch, time, groups, n});
  scan.dt = torch::softplus(projected.narrow(2, inner() + channels, heads) + dt_bias_);
  return time > 1 ? ScanChunked(scan, rows.tensors[kSsm], keep)
                  : ScanByOps(scan, rows.tensors[kSsm], keep);
}

torch::Tensor Mamba2Impl::Run(const torch::Tensor& x, BlockRows& rows, int64_t keep,
                              LayerCarry& carry) {
  const int64_t time = x.size(1);
  const auto projected = Project(norm_->forward(x), in_proj_).contiguous();
  // The projection covers every position whatever `keep` is: a rollback
  // can keep any prefix of the chunk.
  if (carry.updates != nullptr) *carry.updates = {projected};
  const Elementwise how = ElementwiseFor(projected, rows);
  const torch::Tensor y = ConvolveAndScan(projected, rows, keep, how);
  const auto out = Project(GatedNorm(y, projected, how), out_proj_);
  return x.narrow(1, time - keep, keep) + out;
}

bool Mamba2Impl::ReplayUpdates(const std::vector<torch::Tensor>& updates, MixerState& state,
                               const torch::Tensor& slots, int64_t count) const {
  if (updates.size() != 1) return false;
  const torch::Tensor& projected = updates[0];
  TORCH_CHECK(count >= 0 && count <= projected.size(1), "mamba2: replaying ", count,
              " positions of a chunk of ", projected.size(1));
  if (count == 0) {
    ResolveSlots(state, slots, projected.size(0));  // the same checks
    return true;
  }
  const torch::Tensor prefix = projected.narrow(1, 0, count).contiguous();
  const RowAccess access = CanFuse(prefix, state) ? RowAccess::kFusedCpu : RowAccess::kGathered;
  ContinueRows(state, slots, prefix.size(0), count, access, [&](BlockRows& rows) {
    ConvolveAndScan(prefix, rows, 0, ElementwiseFor(prefix, rows));
  });
  return true;
}

bool Mamba2Impl::InPlaceWhenFused(size_t tensor) const { return tensor == kSsm; }

bool Mamba2Impl::StepsPoolRowsOnGpu(const torch::Tensor& x, const MixerState& state) const {
  return CudaPoolStepApplies(x, state) && CudaStepApplies({&a_log_, &skip_, &dt_bias_});
}

}  // namespace attn
