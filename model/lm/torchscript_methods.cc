#include "model/lm/torchscript_methods.h"

#include <torch/script.h>

#include <algorithm>
#include <cctype>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "model/lm/torchscript_blocks.h"
#include "model/mixers/aft.h"

namespace attn {
namespace {

// Helpers every package carries, whatever its kinds: norms, feed-forward,
// positions and each mixer family's prefill and step. Each takes its weights
// as arguments, so the generated methods below only wire layers together.
// Constants that are equations' (LayerNorm's and ScaleNorm's eps 1e-5, log
// 10000) are literals; RMSNorm takes the model's eps.
constexpr char kHelpers[] = R"TS(
def _rmsnorm(self, x: Tensor, gain: Tensor, eps: float) -> Tensor:
    return gain * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

def _scalenorm(self, x: Tensor, gain: Tensor) -> Tensor:
    return gain * x / torch.clamp_min(torch.norm(x, 2, [-1], True), 1e-05)

def _layernorm(self, x: Tensor, gain: Tensor, bias: Tensor) -> Tensor:
    return torch.layer_norm(x, [x.size(-1)], gain, bias, 1e-05)

def _dense(self, x: Tensor, w: Tensor, b: Optional[Tensor]) -> Tensor:
    if x.dim() == 2 and x.size(0) == 1:  # one row: a matrix-vector product is several times faster
        if b is None:
            return torch.mv(w, x[0]).unsqueeze(0)
        return torch.addmv(b, w, x[0]).unsqueeze(0)
    return torch.linear(x, w, b)

def _dequantize(self, values: Tensor, scales: Tensor) -> Tensor:
    return values.float() * scales.unsqueeze(1)

def _feed_forward(self, x: Tensor, up_w: Tensor, up_b: Tensor, down_w: Tensor,
                  down_b: Tensor) -> Tensor:
    return self._dense(torch.gelu(self._dense(x, up_w, up_b)), down_w, down_b)

def _sinusoidal(self, positions: Tensor, d_model: int) -> Tensor:
    i = torch.arange(0, d_model, 2, device=positions.device).double()
    inv_freq = torch.exp(-9.2103403719761836 * i / d_model)
    angles = positions.double().unsqueeze(-1) * inv_freq
    return torch.stack([angles.sin(), angles.cos()], -1).flatten(-2).float()

def _check_context(self, end: int, max_context: int, what: str):
    assert end <= max_context, what + ": a sequence would reach " + str(end) + \
        " tokens; the model handles at most " + str(max_context)

def _read_window_sums(self, state: List[Tensor], first: int, window: int,
                      start: int) -> List[Tensor]:
    # The three vectors, and the rings' min(window, start) entries that exist
    # (oldest first, at their end): what _write_window_sums writes back.
    held = min(window, start)
    return [state[first], state[first + 1], state[first + 2],
            state[first + 3].narrow(1, window - held, held),
            state[first + 4].narrow(1, window - held, held)]

def _write_window_sums(self, sums: List[Tensor], window: int, state: List[Tensor], first: int):
    # The three vectors, and the rings' last entries (oldest first) at their end.
    kept = sums[3].size(1)
    state[first].copy_(sums[0])
    state[first + 1].copy_(sums[1])
    state[first + 2].copy_(sums[2])
    state[first + 3].narrow(1, window - kept, kept).copy_(sums[3])
    state[first + 4].narrow(1, window - kept, kept).copy_(sums[4])

def _aft_factors(self, table: Tensor, start: int, chunk: int, ring: int, window: int,
                 heads: int, device: Device) -> Tensor:
    i = torch.arange(chunk, device=device).unsqueeze(1)
    u = torch.arange(ring + chunk, device=device).unsqueeze(0)
    delta = i + ring - u
    factors = torch.ones([heads, chunk, ring + chunk], device=device)
    if window > 0:
        if table.size(1) > 1:
            rows = table.narrow(1, start, chunk)
        else:
            rows = table.expand([heads, chunk, window])
        index = delta.clamp(0, window - 1).unsqueeze(0).expand([heads, chunk, ring + chunk])
        in_window = (delta >= 0) & (delta < window)
        factors = torch.where(in_window.unsqueeze(0), rows.gather(2, index).exp(), factors)
    return factors.masked_fill((delta < 0).unsqueeze(0), 0.0)

def _aft_block(self, q: Tensor, k: Tensor, v: Tensor, start: int, table: Tensor, window: int,
               heads: int, sums: List[Tensor]) -> Tensor:
    c, num, den, ek, ekv = sums[0], sums[1], sums[2], sums[3], sums[4]
    batch, chunk, d = q.size(0), q.size(1), q.size(2)
    ring = ek.size(1)
    width = d // heads
    m = torch.maximum(c.unsqueeze(1), torch.cummax(k, 1)[0])
    carried = torch.exp(c.unsqueeze(1) - m)
    n = carried * num.unsqueeze(1)
    z = carried * den.unsqueeze(1)
    factors = self._aft_factors(table, start, chunk, ring, window, heads, q.device)
    if ring > 0:
        ring_factors = factors.narrow(2, 0, ring).unsqueeze(0)
        n = n + carried * torch.matmul(ring_factors, ekv.view(batch, ring, heads, width).permute(
            0, 2, 1, 3)).permute(0, 2, 1, 3).reshape(batch, chunk, d)
        z = z + carried * torch.matmul(ring_factors, ek.view(batch, ring, heads, width).permute(
            0, 2, 1, 3)).permute(0, 2, 1, 3).reshape(batch, chunk, d)
    chunk_factors = factors.narrow(2, ring, chunk).permute(1, 2, 0).unsqueeze(-1).expand(
        chunk, chunk, heads, width).reshape(1, chunk, chunk, d)
    weights = torch.exp((k.unsqueeze(1) - m.unsqueeze(2)).clamp_max(0.0)) * chunk_factors
    n = n + (weights * v.unsqueeze(1)).sum(2)
    z = z + weights.sum(2)
    y = torch.sigmoid(q) * n / z
    c_new = m.select(1, chunk - 1)
    rescale = torch.exp(c - c_new).unsqueeze(1)
    ek_chunk = torch.exp(k - c_new.unsqueeze(1))
    ek_all = torch.cat([ek * rescale, ek_chunk], 1)
    ekv_all = torch.cat([ekv * rescale, ek_chunk * v], 1)
    keep = min(window, ring + chunk)
    evicted = ring + chunk - keep
    sums[0] = c_new
    sums[1] = num * rescale.squeeze(1) + ekv_all.narrow(1, 0, evicted).sum(1)
    sums[2] = den * rescale.squeeze(1) + ek_all.narrow(1, 0, evicted).sum(1)
    sums[3] = ek_all.narrow(1, evicted, keep)
    sums[4] = ekv_all.narrow(1, evicted, keep)
    return y

def _aft_prefill(self, x: Tensor, start: int, in_w: Tensor, in_b: Tensor, out_w: Tensor,
                 out_b: Tensor, table: Tensor, window: int, heads: int, block: int,
                 state: List[Tensor], first: int) -> Tensor:
    qkv = torch.linear(x, in_w, in_b).chunk(3, -1)
    time = x.size(1)
    sums = self._read_window_sums(state, first, window, start)
    outputs: List[Tensor] = []
    for begin in range(0, time, block):
        size = min(block, time - begin)
        outputs.append(self._aft_block(qkv[0].narrow(1, begin, size), qkv[1].narrow(1, begin, size),
                                       qkv[2].narrow(1, begin, size), start + begin, table,
                                       window, heads, sums))
    self._write_window_sums(sums, window, state, first)
    return torch.linear(torch.cat(outputs, 1), out_w, out_b)

def _aft_step(self, x: Tensor, t: Tensor, in_w: Tensor, in_b: Tensor, out_w: Tensor,
              out_b: Tensor, table: Tensor, window: int, heads: int, state: List[Tensor],
              first: int) -> Tensor:
    c, num, den = state[first], state[first + 1], state[first + 2]
    ring_ek, ring_ekv = state[first + 3], state[first + 4]
    qkv = self._dense(x, in_w, in_b).chunk(3, -1)
    q, k, v = qkv[0], qkv[1], qkv[2]
    batch, d = x.size(0), x.size(1)
    if window > 0:  # the oldest key leaves the window (zeros until there is one)
        num.add_(ring_ekv.select(1, 0))
        den.add_(ring_ek.select(1, 0))
    raised = torch.maximum(c, k)
    scale = torch.exp(c - raised)
    e = torch.exp(k - raised)
    c.copy_(raised)
    num.mul_(scale)
    den.mul_(scale)
    if window == 0:
        num.add_(e * v)
        den.add_(e)
        return self._dense(torch.sigmoid(q) * num / den, out_w, out_b)
    kept = scale.unsqueeze(1)
    ring_ek.copy_(torch.cat([ring_ek.narrow(1, 1, window - 1) * kept, e.unsqueeze(1)], 1))
    ring_ekv.copy_(torch.cat([ring_ekv.narrow(1, 1, window - 1) * kept, (e * v).unsqueeze(1)], 1))
    width = d // heads
    if table.size(1) > 1:  # a bias row per position: each row's own factors
        factors = table.index_select(1, t).flip(-1).exp().permute(1, 2, 0)
        factors = factors.unsqueeze(-1).expand(batch, window, heads, width)
    else:
        factors = table.select(1, 0).flip(-1).exp().t().unsqueeze(-1).expand(window, heads, width)
    factors = factors.reshape(-1, window, d)
    n = num + (factors * ring_ekv).sum(1)
    z = den + (factors * ring_ek).sum(1)
    return self._dense(torch.sigmoid(q) * n / z, out_w, out_b)

def _decay_factor(self, logit: Tensor) -> Tensor:
    return torch.exp(-torch.softplus(logit, 1.0, 20.0))

def _filter(self, bias: Tensor, window: int, heads: int, d: int) -> Tensor:
    return bias.t().unsqueeze(-1).expand(window, heads, d // heads).reshape(window, d)

def _aft_decay_block(self, q: Tensor, k: Tensor, v: Tensor, lam: Tensor, filter: Tensor,
                     window: int, sums: List[Tensor]) -> Tensor:
    ref, num, den, held_k, held_v = sums[0], sums[1], sums[2], sums[3], sums[4]
    chunk, d = q.size(1), q.size(2)
    ring = held_k.size(1)
    span = ring + chunk
    keys = torch.cat([held_k, k], 1)
    values = torch.cat([held_v, v], 1)
    delta = torch.arange(chunk, device=q.device).unsqueeze(1) + ring - \
        torch.arange(span, device=q.device).unsqueeze(0)
    near = filter.index_select(0, delta.clamp(0, window - 1).flatten()).view(chunk, span, d)
    far = (delta - window).clamp_min(0).float().unsqueeze(-1) * -lam
    w = torch.where((delta < window).unsqueeze(-1), near, far)
    logits = (keys.unsqueeze(1) + w.unsqueeze(0)).masked_fill(
        (delta < 0).view(1, chunk, span, 1), float("-inf"))
    steps = torch.arange(1, chunk + 1, device=q.device).float().unsqueeze(-1)
    carried_ref = ref.unsqueeze(1) - steps.unsqueeze(0) * lam
    m = torch.maximum(torch.max(logits, 2)[0], carried_ref)
    weights = torch.exp(logits - m.unsqueeze(2))
    carried = torch.exp(carried_ref - m)
    n = (weights * values.unsqueeze(1)).sum(2) + carried * num.unsqueeze(1)
    z = weights.sum(2) + carried * den.unsqueeze(1)
    y = torch.sigmoid(q) * n / z
    keep = min(window, span)
    evicted = span - keep
    aged_ref = ref - float(chunk) * lam
    if evicted > 0:
        distance = (chunk - 1 + ring - window) - torch.arange(evicted, device=q.device)
        joining = keys.narrow(1, 0, evicted) - distance.float().unsqueeze(-1) * lam
        new_ref = torch.maximum(aged_ref, torch.max(joining, 1)[0])
        old_scale = torch.exp(aged_ref - new_ref)
        e = torch.exp(joining - new_ref.unsqueeze(1))
        sums[1] = num * old_scale + (e * values.narrow(1, 0, evicted)).sum(1)
        sums[2] = den * old_scale + e.sum(1)
        sums[0] = new_ref
    else:
        sums[0] = aged_ref
    sums[3] = keys.narrow(1, evicted, keep)
    sums[4] = values.narrow(1, evicted, keep)
    return y

def _aft_decay_prefill(self, x: Tensor, start: int, in_w: Tensor, in_b: Tensor, out_w: Tensor,
                       out_b: Tensor, bias: Tensor, logit: Tensor, window: int, heads: int,
                       block: int, state: List[Tensor], first: int) -> Tensor:
    qkv = torch.linear(x, in_w, in_b).chunk(3, -1)
    time = x.size(1)
    lam = -torch.log(self._decay_factor(logit))
    filter = self._filter(bias, window, heads, x.size(2))
    sums = self._read_window_sums(state, first, window, start)
    outputs: List[Tensor] = []
    for begin in range(0, time, block):
        size = min(block, time - begin)
        outputs.append(self._aft_decay_block(qkv[0].narrow(1, begin, size),
                                             qkv[1].narrow(1, begin, size),
                                             qkv[2].narrow(1, begin, size), lam, filter, window,
                                             sums))
    self._write_window_sums(sums, window, state, first)
    return torch.linear(torch.cat(outputs, 1), out_w, out_b)

def _aft_decay_step(self, x: Tensor, t: Tensor, in_w: Tensor, in_b: Tensor, out_w: Tensor,
                    out_b: Tensor, bias: Tensor, logit: Tensor, window: int, heads: int,
                    state: List[Tensor], first: int) -> Tensor:
    ref, num, den = state[first], state[first + 1], state[first + 2]
    ring_k, ring_v = state[first + 3], state[first + 4]
    qkv = self._dense(x, in_w, in_b).chunk(3, -1)
    q, k, v = qkv[0], qkv[1], qkv[2]
    d = x.size(1)
    a = self._decay_factor(logit)
    # The oldest ring entry (age order) is the key at t - window once t >= window.
    leaving = (t >= window).unsqueeze(-1)
    old_k, old_v = ring_k.select(1, 0), ring_v.select(1, 0)
    raised = torch.maximum(ref, old_k)
    scale = torch.exp(ref - raised) * a
    e = torch.exp(old_k - raised)
    joined_den = den * scale + e
    fold = (joined_den < 9.3132257e-10) & (joined_den > 0.0)
    joined_num = num * scale + e * old_v
    joined_ref = torch.where(fold, raised + torch.log(joined_den), raised)
    joined_num = torch.where(fold, joined_num / joined_den, joined_num)
    joined_den = torch.where(fold, torch.ones_like(joined_den), joined_den)
    ref.copy_(torch.where(leaving, joined_ref, ref))
    num.copy_(torch.where(leaving, joined_num, num))
    den.copy_(torch.where(leaving, joined_den, den))
    ring_k.copy_(torch.cat([ring_k.narrow(1, 1, window - 1), k.unsqueeze(1)], 1))
    ring_v.copy_(torch.cat([ring_v.narrow(1, 1, window - 1), v.unsqueeze(1)], 1))
    age = torch.arange(window - 1, -1, -1, device=x.device)
    filter = self._filter(bias, window, heads, d).flip(0)
    logits = (ring_k + filter.unsqueeze(0)).masked_fill(
        (age.unsqueeze(0) > t.unsqueeze(1)).unsqueeze(-1), float("-inf"))
    m = torch.maximum(torch.max(logits, 1)[0], ref)
    weights = torch.exp(logits - m.unsqueeze(1))
    carried = torch.exp(ref - m)
    n = num * carried + (weights * ring_v).sum(1)
    z = den * carried + weights.sum(1)
    return self._dense(torch.sigmoid(q) * n / z, out_w, out_b)

def _phi(self, x: Tensor, exp_feature: bool) -> Tensor:
    if exp_feature:
        return torch.exp(x - torch.max(x, -1, True)[0])
    return torch.elu(x) + 1.0

def _linear_prefill(self, x: Tensor, in_w: Tensor, in_b: Tensor, out_w: Tensor, out_b: Tensor,
                    heads: int, exp_feature: bool, eps: float, block: int,
                    decay_logit: Optional[Tensor], state: List[Tensor], first: int) -> Tensor:
    batch, time, d = x.size(0), x.size(1), x.size(2)
    qkv = torch.linear(x, in_w, in_b).chunk(3, -1)
    q = self._phi(qkv[0].view(batch, time, heads, d // heads).transpose(1, 2), exp_feature)
    k = self._phi(qkv[1].view(batch, time, heads, d // heads).transpose(1, 2), exp_feature)
    v = qkv[2].view(batch, time, heads, d // heads).transpose(1, 2)
    s, z = state[first], state[first + 1]
    outputs: List[Tensor] = []
    for begin in range(0, time, block):
        size = min(block, time - begin)
        pq, pk, vv = q.narrow(2, begin, size), k.narrow(2, begin, size), v.narrow(2, begin, size)
        within = torch.matmul(pq, pk.transpose(-2, -1)).tril()
        carried_num = torch.matmul(pq, s)
        carried_den = (pq * z.unsqueeze(2)).sum(-1, keepdim=True)
        if decay_logit is not None:
            lam = (-torch.log(self._decay_factor(decay_logit))).view(1, -1, 1, 1)
            i = torch.arange(size, device=x.device).float().view(1, 1, size, 1)
            within = within * torch.exp(-lam * (i - i.transpose(-2, -1)).clamp_min(0.0))
            state_age = torch.exp(-lam * (i + 1.0))
            carried_num = carried_num * state_age
            carried_den = carried_den * state_age
            pk = pk * torch.exp(-lam * (size - 1.0 - i))
            s = s * torch.exp(-lam * float(size))
            z = z * torch.exp(-lam * float(size)).squeeze(-1)
        num = carried_num + torch.matmul(within, vv)
        den = carried_den.squeeze(-1) + within.sum(-1)
        outputs.append(num / (den + eps).unsqueeze(-1))
        s = s + torch.matmul(pk.transpose(-2, -1), vv)
        z = z + pk.sum(2)
    state[first].copy_(s)
    state[first + 1].copy_(z)
    y = torch.cat(outputs, 2).transpose(1, 2).reshape(batch, time, d)
    return torch.linear(y, out_w, out_b)

def _linear_step(self, x: Tensor, in_w: Tensor, in_b: Tensor, out_w: Tensor, out_b: Tensor,
                 heads: int, exp_feature: bool, eps: float, decay_logit: Optional[Tensor],
                 state: List[Tensor], first: int) -> Tensor:
    batch, d = x.size(0), x.size(1)
    qkv = self._dense(x, in_w, in_b).chunk(3, -1)
    q = self._phi(qkv[0].view(batch, heads, d // heads), exp_feature)
    k = self._phi(qkv[1].view(batch, heads, d // heads), exp_feature)
    v = qkv[2].view(batch, heads, d // heads)
    s, z = state[first], state[first + 1]
    if decay_logit is not None:
        g = self._decay_factor(decay_logit)
        s.mul_(g.view(1, -1, 1, 1))
        z.mul_(g.view(1, -1, 1))
    s.add_(k.unsqueeze(-1) * v.unsqueeze(-2))
    z.add_(k)
    num = torch.matmul(q.unsqueeze(-2), s).squeeze(-2)
    den = (q * z).sum(-1) + eps
    return self._dense((num / den.unsqueeze(-1)).reshape(batch, d), out_w, out_b)

def _mha_prefill(self, x: Tensor, start: int, in_w: Tensor, in_b: Tensor, out_w: Tensor,
                 out_b: Tensor, log_slopes: Optional[Tensor], heads: int, max_context: int,
                 state: List[Tensor], first: int) -> Tensor:
    batch, time, d = x.size(0), x.size(1), x.size(2)
    head_dim = d // heads
    self._check_context(start + time, max_context, "prefill")
    qkv = torch.linear(x, in_w, in_b).chunk(3, -1)
    q = qkv[0].view(batch, time, heads, head_dim).transpose(1, 2)
    keys, values = state[first], state[first + 1]
    keys.narrow(2, start, time).copy_(qkv[1].view(batch, time, heads, head_dim).transpose(1, 2))
    values.narrow(2, start, time).copy_(qkv[2].view(batch, time, heads, head_dim).transpose(1, 2))
    end = start + time
    scores = torch.matmul(q * (1.0 / head_dim ** 0.5), keys.narrow(2, 0, end).transpose(-2, -1))
    i = torch.arange(start, end, device=x.device).unsqueeze(1)
    j = torch.arange(end, device=x.device).unsqueeze(0)
    if log_slopes is not None:
        slopes = log_slopes.exp()
        distance = (i.float() - j.float()).abs()
        scores = scores + (-slopes.view(-1, 1, 1) * distance.unsqueeze(0))
    scores = scores.masked_fill(j > i, float("-inf"))
    y = torch.matmul(torch.softmax(scores, -1), values.narrow(2, 0, end))
    return torch.linear(y.transpose(1, 2).reshape(batch, time, d), out_w, out_b)

def _mha_step(self, x: Tensor, t: Tensor, in_w: Tensor, in_b: Tensor, out_w: Tensor,
              out_b: Tensor, log_slopes: Optional[Tensor], heads: int, max_context: int,
              state: List[Tensor], first: int) -> Tensor:
    batch, d = x.size(0), x.size(1)
    head_dim = d // heads
    end = int(t.max()) + 1 if batch > 0 else 0
    self._check_context(end, max_context, "step")
    qkv = self._dense(x, in_w, in_b).chunk(3, -1)
    q = qkv[0].view(batch, heads, 1, head_dim)
    keys, values = state[first], state[first + 1]
    at = t.view(batch, 1, 1, 1).expand(batch, heads, 1, head_dim)
    keys.scatter_(2, at, qkv[1].view(batch, heads, 1, head_dim))
    values.scatter_(2, at, qkv[2].view(batch, heads, 1, head_dim))
    scores = torch.matmul(q * (1.0 / head_dim ** 0.5), keys.narrow(2, 0, end).transpose(-2, -1))
    j = torch.arange(end, device=x.device).unsqueeze(0)
    if log_slopes is not None:
        slopes = log_slopes.exp()
        distance = (t.unsqueeze(1).float() - j.float()).abs()
        scores = scores + (-slopes.view(1, -1, 1, 1) * distance.view(batch, 1, 1, end))
    scores = scores.masked_fill((j > t.unsqueeze(1)).view(batch, 1, 1, end), float("-inf"))
    y = torch.matmul(torch.softmax(scores, -1), values.narrow(2, 0, end))
    return self._dense(y.reshape(batch, d), out_w, out_b)
)TS";

int64_t WindowOf(const LmConfig& c) { return AftWindow(c.mixer_options()); }

bool IsAft(MixerKind kind) {
  return kind == MixerKind::kAftFull || kind == MixerKind::kAftLocal ||
         kind == MixerKind::kAftSimple || kind == MixerKind::kAftConv;
}

bool IsLinear(MixerKind kind) {
  return kind == MixerKind::kLinearElu || kind == MixerKind::kLinearExp ||
         kind == MixerKind::kLinearDecay;
}

// "self.layers_0_mixer_in_proj_weight" for layer 0 and "mixer.in_proj.weight".
std::string Param(int64_t layer, const std::string& name) {
  return "self." + ScriptTensorName(absl::StrCat("layers.", layer, ".", name));
}

std::string NormCall(const LmConfig& c, const std::string& prefix, const std::string& x) {
  const std::string gain = "self." + ScriptTensorName(prefix + ".gain");
  switch (c.norm) {
    case NormKind::kRmsNorm:
      return absl::StrCat("self._rmsnorm(", x, ", ", gain, ", ", ScriptFloat(c.norm_eps), ")");
    case NormKind::kScaleNorm:
      return absl::StrCat("self._scalenorm(", x, ", ", gain, ")");
    case NormKind::kLayerNorm:
      return absl::StrCat("self._layernorm(", x, ", ", gain, ", self.",
                          ScriptTensorName(prefix + ".bias"), ")");
  }
  return x;
}

// The state tensors of one layer, as init_state creates them.
std::vector<std::string> LayerStateInit(const LmConfig& c) {
  const int64_t d = c.d_model, h = c.heads, dh = c.d_model / c.heads;
  const std::string opts = "device=device";
  if (IsAft(c.mixer)) {
    const int64_t s = WindowOf(c);
    return {absl::StrCat("torch.full([batch, ", d, "], float(\"-inf\"), ", opts, ")"),
            absl::StrCat("torch.zeros([batch, ", d, "], ", opts, ")"),
            absl::StrCat("torch.zeros([batch, ", d, "], ", opts, ")"),
            absl::StrCat("torch.zeros([batch, ", s, ", ", d, "], ", opts, ")"),
            absl::StrCat("torch.zeros([batch, ", s, ", ", d, "], ", opts, ")")};
  }
  if (c.mixer == MixerKind::kAftDecay) {
    const int64_t s = c.window;
    return {absl::StrCat("torch.full([batch, ", d, "], float(\"-inf\"), ", opts, ")"),
            absl::StrCat("torch.zeros([batch, ", d, "], ", opts, ")"),
            absl::StrCat("torch.zeros([batch, ", d, "], ", opts, ")"),
            absl::StrCat("torch.zeros([batch, ", s, ", ", d, "], ", opts, ")"),
            absl::StrCat("torch.zeros([batch, ", s, ", ", d, "], ", opts, ")")};
  }
  if (IsLinear(c.mixer)) {
    return {absl::StrCat("torch.zeros([batch, ", h, ", ", dh, ", ", dh, "], ", opts, ")"),
            absl::StrCat("torch.zeros([batch, ", h, ", ", dh, "], ", opts, ")")};
  }
  const std::string cache =
      absl::StrCat("torch.zeros([batch, ", h, ", ", c.max_context, ", ", dh, "], ", opts, ")");
  return {cache, cache};
}

// One layer's mixer call in prefill (step = false) or step form; the state
// tensors of the layer start at state[first].
std::string MixerCall(const LmConfig& c, int64_t layer, int64_t first, bool step) {
  const std::string weights = absl::StrCat(
      Param(layer, "mixer.in_proj.weight"), ", ", Param(layer, "mixer.in_proj.bias"), ", ",
      Param(layer, "mixer.out_proj.weight"), ", ", Param(layer, "mixer.out_proj.bias"));
  const int64_t block = c.mixer_options().chunk;
  if (IsAft(c.mixer)) {
    const int64_t window = WindowOf(c);
    const int64_t heads = c.mixer == MixerKind::kAftConv ? c.heads : 1;
    const std::string table = window > 0 ? Param(layer, "mixer.position_bias") : "empty";
    return step ? absl::StrCat("self._aft_step(x, length, ", weights, ", ", table, ", ", window,
                               ", ", heads, ", state, ", first, ")")
                : absl::StrCat("self._aft_prefill(x, start, ", weights, ", ", table, ", ", window,
                               ", ", heads, ", ", block, ", state, ", first, ")");
  }
  if (c.mixer == MixerKind::kAftDecay) {
    const std::string decay =
        absl::StrCat(Param(layer, "mixer.position_bias"), ", ", Param(layer, "mixer.decay_logit"),
                     ", ", c.window, ", ", c.heads);
    return step ? absl::StrCat("self._aft_decay_step(x, length, ", weights, ", ", decay,
                               ", state, ", first, ")")
                : absl::StrCat("self._aft_decay_prefill(x, start, ", weights, ", ", decay, ", ",
                               block, ", state, ", first, ")");
  }
  if (IsLinear(c.mixer)) {
    const std::string exp = c.mixer == MixerKind::kLinearExp ? "True" : "False";
    const std::string eps = absl::StrCat(c.mixer_options().linear_eps);
    const std::string decay =
        c.mixer == MixerKind::kLinearDecay ? Param(layer, "mixer.decay_logit") : "None";
    return step ? absl::StrCat("self._linear_step(x, ", weights, ", ", c.heads, ", ", exp, ", ",
                               eps, ", ", decay, ", state, ", first, ")")
                : absl::StrCat("self._linear_prefill(x, ", weights, ", ", c.heads, ", ", exp, ", ",
                               eps, ", ", block, ", ", decay, ", state, ", first, ")");
  }
  const std::string slopes =
      c.mixer == MixerKind::kMhaAlibi ? Param(layer, "mixer.log_alibi_slopes") : "None";
  return absl::StrCat(step ? "self._mha_step(x, length, " : "self._mha_prefill(x, start, ", weights,
                      ", ", slopes, ", ", c.heads, ", ", c.max_context, ", state, ", first, ")");
}

// The body shared by prefill and step after `h` holds the embedded tokens:
// every layer, then the head into `logits`.
std::string LayersAndHead(const LmConfig& c, bool step) {
  const int64_t per_layer = static_cast<int64_t>(LayerStateInit(c).size());
  std::string body;
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string prefix = absl::StrCat("layers.", l);
    absl::StrAppend(&body, "    x = ", NormCall(c, prefix + ".mix_norm", "h"), "\n");
    absl::StrAppend(&body, "    h = h + ", MixerCall(c, l, 1 + l * per_layer, step), "\n");
    absl::StrAppend(&body, "    h = h + self._feed_forward(", NormCall(c, prefix + ".ff_norm", "h"),
                    ", ", Param(l, "ff.up.weight"), ", ", Param(l, "ff.up.bias"), ", ",
                    Param(l, "ff.down.weight"), ", ", Param(l, "ff.down.bias"), ")\n");
  }
  absl::StrAppend(&body, "    logits = self._dense(", NormCall(c, "final_norm", "h"),
                  ", self.embedding_weight, None)\n");
  return body;
}

// h = token embeddings plus positional embeddings at `positions`.
std::string Embed(const LmConfig& c, const std::string& positions) {
  std::string code = "    h = torch.embedding(self.embedding_weight, tokens)\n";
  if (c.positions == PositionKind::kSinusoidal) {
    absl::StrAppend(&code, "    h = h + self._sinusoidal(", positions, ", ", c.d_model, ")\n");
  } else if (c.positions == PositionKind::kLearned) {
    absl::StrAppend(&code, "    h = h + torch.embedding(self.positions_table, ", positions, ")\n");
  }
  return code;
}

// The largest length learned positions allow, or none.
std::string PositionLimit(const LmConfig& c, const std::string& end, const std::string& what) {
  if (c.positions != PositionKind::kLearned) return "";
  return absl::StrCat("    self._check_context(", end, ", ", c.max_context, ", \"", what, "\")\n");
}

std::string GeneratedMethods(const LmConfig& c) {
  if (HasBlockTorchScriptMethods(c)) return BlockTorchScriptMethods(c);
  std::vector<std::string> init;
  init.push_back("torch.zeros([batch], device=device).long()");
  for (int64_t l = 0; l < c.layers; ++l) {
    for (auto& tensor : LayerStateInit(c)) init.push_back(tensor);
  }
  std::string code = absl::StrCat(
      "\ndef init_state(self, batch: int) -> List[Tensor]:\n"
      "    device = self.embedding_weight.device\n"
      "    return [",
      absl::StrJoin(init, ",\n            "), "]\n");

  absl::StrAppend(
      &code,
      "\ndef prefill(self, tokens: Tensor, state: List[Tensor]) -> Tuple[Tensor, List[Tensor]]:\n"
      "    length = state[0]\n"
      "    batch, time = tokens.size(0), tokens.size(1)\n"
      "    start = int(length[0]) if batch > 0 else 0\n"
      "    assert batch == 0 or bool((length == start).all()), "
      "\"prefill: every row must be at the same length\"\n"
      "    empty = torch.empty([0])\n"
      "    positions = (torch.arange(time, device=tokens.device) + start).unsqueeze(0)"
      ".expand(batch, time)\n",
      PositionLimit(c, "start + time", "prefill"), Embed(c, "positions"),
      LayersAndHead(c, /*step=*/false),
      "    length.add_(time)\n"
      "    return logits, state\n");

  absl::StrAppend(
      &code,
      "\ndef step(self, tokens: Tensor, state: List[Tensor]) -> Tuple[Tensor, List[Tensor]]:\n"
      "    length = state[0]\n"
      "    empty = torch.empty([0])\n",
      PositionLimit(c, "int(length.max()) + 1 if tokens.size(0) > 0 else 0", "step"),
      Embed(c, "length"), LayersAndHead(c, /*step=*/true),
      "    length.add_(1)\n"
      "    return logits, state\n");

  absl::StrAppend(&code,
                  "\ndef forward(self, tokens: Tensor) -> Tensor:\n"
                  "    return self.prefill(tokens, self.init_state(tokens.size(0)))[0]\n");
  return code;
}

}  // namespace

bool HasTorchScriptMethods(const LmConfig& config) {
  if (config.mixer == MixerKind::kRelative) return false;
  if (HasBlockTorchScriptMethods(config)) return BlockTorchScriptMethodsCover(config);
  return config.ff == FeedForwardKind::kGelu &&
         (config.norm_eps == 1e-5 || config.norm == NormKind::kRmsNorm);
}

std::string ScriptTensorName(const std::string& name) {
  return absl::StrReplaceAll(name, {{".", "_"}});
}

std::string Int8ScaleName(const std::string& script_name) { return script_name + "_int8_scale"; }

std::string TorchScriptSource(const LmConfig& config, const std::vector<std::string>& int8_names) {
  std::string source = absl::StrCat(kHelpers, GeneratedMethods(config));
  // Every read of an int8 buffer dequantises it: the methods stay the float
  // model's, whatever the package stores. Whole names only: a name followed
  // by more of an identifier is another buffer.
  const auto is_identifier = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  };
  for (const std::string& name : int8_names) {
    const std::string read = "self." + name;
    const std::string dequantized =
        absl::StrCat("self._dequantize(self.", name, ", self.", Int8ScaleName(name), ")");
    std::string rewritten;
    size_t from = 0;
    for (size_t at = source.find(read); at != std::string::npos; at = source.find(read, at + 1)) {
      const size_t end = at + read.size();
      if (end < source.size() && is_identifier(source[end])) continue;
      absl::StrAppend(&rewritten, source.substr(from, at - from), dequantized);
      from = end;
    }
    source = absl::StrCat(rewritten, source.substr(from));
  }
  return source;
}

void DefineTorchScriptMethods(torch::jit::Module& module, const LmConfig& config,
                              const std::vector<std::string>& int8_names) {
  module.define(TorchScriptSource(config, int8_names));
}

}  // namespace attn
