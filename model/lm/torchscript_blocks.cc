#include "model/lm/torchscript_blocks.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/lm/torchscript_methods.h"

namespace attn {
namespace {

// What every whole-block package carries: a bias-free projection of [B, T,
// C] rows, and the token shift (the token before each, the state's first).
constexpr char kBlockHelpers[] = R"TS(
def _rows(self, x: Tensor, w: Tensor) -> Tensor:
    return self._dense(x.reshape(-1, x.size(-1)), w, None).reshape(x.size(0), x.size(1), -1)

def _shifted(self, x: Tensor, shift: Tensor) -> Tensor:
    return torch.cat([shift.unsqueeze(1), x.narrow(1, 0, x.size(1) - 1)], 1)
)TS";

// One RWKV-4 block over x [B, T, C] (model/mixers/rwkv4.h), continuing
// state[at .. at + 4] (att_shift, num, den, max, ffn_shift) in place; p in
// the order of Rwkv4Weights.
constexpr char kRwkv4Helpers[] = R"TS(
def _rwkv4_block(self, x: Tensor, p: List[Tensor], first: bool, halve: bool,
                 state: List[Tensor], at: int) -> Tensor:
    time = x.size(1)
    if first:
        x = self._layernorm(x, p[0], p[1])
    a = self._layernorm(x, p[2], p[3])
    prev = self._shifted(a, state[at])
    k = self._rows(prev + (a - prev) * p[6], p[9])
    v = self._rows(prev + (a - prev) * p[7], p[10])
    r = torch.sigmoid(self._rows(prev + (a - prev) * p[8], p[11]))
    w = -torch.exp(p[12])
    num, den, mx = state[at + 1], state[at + 2], state[at + 3]
    outputs: List[Tensor] = []
    for t in range(time):
        kt, vt = k[:, t], v[:, t]
        bonus = p[13] + kt
        q = torch.maximum(mx, bonus)
        e1, e2 = torch.exp(mx - q), torch.exp(bonus - q)
        outputs.append((e1 * num + e2 * vt) / (e1 * den + e2))
        decayed = mx + w
        q = torch.maximum(decayed, kt)
        e1, e2 = torch.exp(decayed - q), torch.exp(kt - q)
        num, den, mx = e1 * num + e2 * vt, e1 * den + e2, q
    state[at + 1].copy_(num)
    state[at + 2].copy_(den)
    state[at + 3].copy_(mx)
    h = x + self._rows(r * torch.stack(outputs, 1), p[14])
    b = self._layernorm(h, p[4], p[5])
    pb = self._shifted(b, state[at + 4])
    gate = torch.sigmoid(self._rows(pb + (b - pb) * p[15], p[17]))
    hidden = torch.relu(self._rows(pb + (b - pb) * p[16], p[18])).pow(2)
    out = h + gate * self._rows(hidden, p[19])
    state[at].copy_(a[:, time - 1])
    state[at + 4].copy_(b[:, time - 1])
    if halve:
        out = out * 0.5
    return out
)TS";

// One Mamba-2 block over x [B, T, C] (model/mixers/mamba2.h), continuing
// state[at] (the convolution's window [B, W - 1, channels]) and state[at +
// 1] (S [B, H, P, N]) in place; p in the order of Mamba2Weights. A chunk
// of several tokens takes the chunked form (_mamba2_chunked, the one of
// Mamba2Impl::ScanChunked), a step the recurrence.
constexpr char kMamba2Helpers[] = R"TS(
def _mamba2_block(self, x: Tensor, p: List[Tensor], heads: int, groups: int, n: int,
                  chunk: int, eps: float, state: List[Tensor], at: int) -> Tensor:
    batch, time = x.size(0), x.size(1)
    inner = p[7].size(0)
    channels = p[3].size(0)
    width = p[2].size(2)
    proj = self._rows(self._rmsnorm(x, p[0], eps), p[1])
    window = torch.cat([state[at], proj[:, :, inner:inner + channels]], 1)
    acc = p[3].expand([batch, time, channels])
    for j in range(width):
        acc = acc + window[:, j:j + time] * p[2][:, 0, j]
    state[at].copy_(window[:, time:])
    xbc = acc * torch.sigmoid(acc)
    xs = xbc[:, :, :inner].reshape(batch, time, heads, inner // heads)
    bm = xbc[:, :, inner:inner + groups * n].reshape(batch, time, groups, n)
    cm = xbc[:, :, inner + groups * n:].reshape(batch, time, groups, n)
    dt = proj[:, :, inner + channels:] + p[4]
    dt = torch.where(dt > 20.0, dt, torch.log1p(torch.exp(dt)))  # softplus
    a = -torch.exp(p[5])
    s = state[at + 1]
    if time > 1:
        y, s = self._mamba2_chunked(xs, bm, cm, dt, a, s, groups, chunk)
        y = y + xs * p[6].view(1, 1, heads, 1)
    else:
        bm = bm.repeat_interleave(heads // groups, 2)
        cm = cm.repeat_interleave(heads // groups, 2)
        s = (s * torch.exp(dt[:, 0] * a).view(batch, heads, 1, 1)
             + (xs[:, 0] * dt[:, 0].unsqueeze(-1)).unsqueeze(-1) * bm[:, 0].unsqueeze(2))
        y = torch.matmul(s, cm[:, 0].unsqueeze(-1)).squeeze(-1) + xs[:, 0] * p[6].view(1, heads, 1)
    state[at + 1].copy_(s)
    y = y.reshape(batch, time, inner)
    z = proj[:, :, :inner]
    g = (y * z * torch.sigmoid(z)).view(batch, time, groups, inner // groups)
    g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + eps)
    return x + self._rows(g.view(batch, time, inner) * p[7], p[8])

def _mamba2_chunked(self, xs: Tensor, bm: Tensor, cm: Tensor, dt: Tensor, a: Tensor, s: Tensor,
                    groups: int, chunk: int) -> Tuple[Tensor, Tensor]:
    batch, time, heads, hp = xs.size(0), xs.size(1), xs.size(2), xs.size(3)
    n = bm.size(3)
    r = heads // groups
    q = min(chunk, time)
    k = (time + q - 1) // q
    extra = k * q - time
    if extra > 0:
        xs = torch.cat([xs, xs.new_zeros([batch, extra, heads, hp])], 1)
        bm = torch.cat([bm, bm.new_zeros([batch, extra, groups, n])], 1)
        cm = torch.cat([cm, cm.new_zeros([batch, extra, groups, n])], 1)
        dt = torch.cat([dt, dt.new_zeros([batch, extra, heads])], 1)
    la = (dt * a).view(batch, k, q, groups, r).permute(0, 3, 4, 1, 2)
    dtx = (xs * dt.unsqueeze(-1)).view(batch, k, q, groups, r, hp).permute(0, 3, 4, 1, 2, 5)
    b = bm.view(batch, k, q, groups, 1, n).permute(0, 3, 4, 1, 2, 5)
    c = cm.view(batch, k, q, groups, 1, n).permute(0, 3, 4, 1, 2, 5)
    ones = torch.ones([q, q], device=xs.device)
    seg = la.unsqueeze(-1).expand(batch, groups, r, k, q, q)
    seg = seg.masked_fill(ones.tril(-1) == 0, 0.0).cumsum(-2)
    within = torch.exp(seg.masked_fill(ones.tril() == 0, float("-inf")))
    y = torch.matmul(within * torch.matmul(c, b.transpose(-1, -2)), dtx)
    to_end = within[:, :, :, :, q - 1].unsqueeze(-1)
    added = torch.matmul((dtx * to_end).transpose(-1, -2), b)
    from_start = torch.exp(la.cumsum(-1))
    st = s.view(batch, groups, r, hp, n)
    entering: List[Tensor] = []
    for j in range(k):
        entering.append(st)
        st = st * from_start[:, :, :, j, q - 1].view(batch, groups, r, 1, 1) + added[:, :, :, j]
    past = torch.matmul(c, torch.stack(entering, 3).transpose(-1, -2))
    y = y + past * from_start.unsqueeze(-1)
    y = y.permute(0, 3, 4, 1, 2, 5).reshape(batch, k * q, heads, hp)
    return y[:, :time], st.reshape(batch, heads, hp, n)
)TS";

// The layers of a hybrid that are not whole blocks: norm, mixer, residual,
// then norm, feed-forward, residual (MixerBlock in model/lm/block.cc).
// _swiglu is feed_forward.h's swiglu over rows [B, T, d]; _experts
// model/layers/mixture_of_experts.h's top-k mixture over any leading dims.
// _short_conv is model/mixers/short_conv.h over x [B, T, d], continuing
// state[at] (the last L - 1 gated inputs [B, L - 1, d]). _gqa is
// model/mixers/grouped_attention.h over x [B, T, d] whose rows start at
// `start` [B] (a prefill's all alike, a step's each its own), writing their
// keys and values at those positions of state[at] and state[at + 1]
// [B, KV, max_context, Dh]; theta 0 means no rotary positions.
constexpr char kMixerBlockHelpers[] = R"TS(
def _swiglu(self, x: Tensor, gate_w: Tensor, up_w: Tensor, down_w: Tensor) -> Tensor:
    return self._rows(torch.silu(self._rows(x, gate_w)) * self._rows(x, up_w), down_w)

def _experts(self, x: Tensor, router_w: Tensor, gates: List[Tensor], ups: List[Tensor],
             downs: List[Tensor], top_k: int) -> Tensor:
    rows = x.reshape(-1, x.size(-1))
    top, chosen = torch.topk(self._dense(rows, router_w, None), top_k, 1)
    weights = torch.softmax(top, 1)
    out = torch.zeros_like(rows)
    for e in range(len(gates)):
        picks = (chosen == e).reshape(-1).nonzero().squeeze(1)
        if picks.numel() > 0:
            row_ids = torch.div(picks, top_k, rounding_mode="floor")
            served = rows.index_select(0, row_ids).unsqueeze(0)
            y = self._swiglu(served, gates[e], ups[e], downs[e]).squeeze(0)
            out.index_add_(0, row_ids, y * weights.reshape(-1, 1).index_select(0, picks))
    return out.view(x.size())

def _short_conv(self, x: Tensor, in_w: Tensor, conv_w: Tensor, out_w: Tensor,
                state: List[Tensor], at: int) -> Tensor:
    d, time, width = x.size(2), x.size(1), conv_w.size(2)
    proj = self._rows(x, in_w)
    inputs = torch.cat([state[at], proj[:, :, :d] * proj[:, :, 2 * d:]], 1)
    state[at].copy_(inputs[:, time:])
    z = inputs[:, 0:time] * conv_w[:, 0, 0]
    for j in range(1, width):
        z = z + inputs[:, j:j + time] * conv_w[:, 0, j]
    return self._rows(proj[:, :, d:2 * d] * z, out_w)

def _rotate(self, a: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = a.size(-1) // 2
    first, second = a[..., :half], a[..., half:]
    return torch.cat([first * cos - second * sin, second * cos + first * sin], -1)

def _gqa(self, x: Tensor, start: Tensor, qkv_w: Tensor, q_gain: Optional[Tensor],
         k_gain: Optional[Tensor], out_w: Tensor, heads: int, kv_heads: int, theta: float,
         eps: float, max_context: int, state: List[Tensor], at: int) -> Tensor:
    batch, time, d = x.size(0), x.size(1), x.size(2)
    hd = d // heads
    dq, dkv = heads * hd, kv_heads * hd
    end = int(start.max()) + time if batch > 0 else 0
    self._check_context(end, max_context, "attention")
    qkv = self._rows(x, qkv_w)
    q = qkv[:, :, :dq].reshape(batch, time, heads, hd)
    k = qkv[:, :, dq:dq + dkv].reshape(batch, time, kv_heads, hd)
    v = qkv[:, :, dq + dkv:].reshape(batch, time, kv_heads, hd)
    if q_gain is not None and k_gain is not None:
        q = self._rmsnorm(q, q_gain, eps)
        k = self._rmsnorm(k, k_gain, eps)
    positions = start.unsqueeze(1) + torch.arange(time, device=x.device).unsqueeze(0)
    if theta > 0.0:
        inv_freq = torch.pow(theta, torch.arange(0, hd, 2, device=x.device).double() / -hd)
        angles = positions.double().unsqueeze(-1).unsqueeze(-1) * inv_freq
        cos, sin = angles.cos().float(), angles.sin().float()
        q = self._rotate(q, cos, sin)
        k = self._rotate(k, cos, sin)
    keys, values = state[at], state[at + 1]
    index = positions.view(batch, 1, time, 1).expand(batch, kv_heads, time, hd)
    keys.scatter_(2, index, k.transpose(1, 2))
    values.scatter_(2, index, v.transpose(1, 2))
    group = heads // kv_heads
    scores = torch.matmul(q.transpose(1, 2) * (1.0 / hd ** 0.5),
                          keys.narrow(2, 0, end).repeat_interleave(group, 1).transpose(-2, -1))
    j = torch.arange(end, device=x.device).view(1, 1, 1, end)
    scores = scores.masked_fill(j > positions.view(batch, 1, time, 1), float("-inf"))
    y = torch.matmul(torch.softmax(scores, -1),
                     values.narrow(2, 0, end).repeat_interleave(group, 1))
    return self._rows(y.transpose(1, 2).reshape(batch, time, dq), out_w)
)TS";

// "self.layers_L_mixer_NAME": a block parameter's attribute.
std::string BlockParam(int64_t layer, const std::string& name) {
  return absl::StrCat("self.layers_", layer, "_mixer_", name);
}

std::vector<std::string> Rwkv4Weights(int64_t layer) {
  std::vector<std::string> p;
  for (const char* name : {"ln0_gain",       "ln0_bias",        "ln1_gain",
                           "ln1_bias",       "ln2_gain",        "ln2_bias",
                           "mix_k",          "mix_v",           "mix_r",
                           "key_weight",     "value_weight",    "receptance_weight",
                           "time_decay",     "time_first",      "output_weight",
                           "ffn_mix_r",      "ffn_mix_k",       "ffn_receptance_weight",
                           "ffn_key_weight", "ffn_value_weight"}) {
    const bool ln0 = absl::StartsWith(name, "ln0");
    p.push_back(ln0 && layer > 0 ? "empty" : BlockParam(layer, name));
  }
  return p;
}

std::vector<std::string> Mamba2Weights(int64_t layer) {
  std::vector<std::string> p;
  for (const char* name : {"norm_gain", "in_proj_weight", "conv_weight", "conv_bias", "dt_bias",
                           "a_log", "skip", "out_norm_weight", "out_proj_weight"}) {
    p.push_back(BlockParam(layer, name));
  }
  return p;
}

// One RWKV-7 block over x [B, T, C] (model/mixers/rwkv7.h), continuing the
// state tensors state[at] (att_shift), state[at + 1] (S [B, H, N, N]) and
// state[at + 2] (ffn_shift) in place. p holds the block's weights in the
// order of BlockWeights below (empty tensors where a layer has none).
// Returns the block's output and the value residual (the first layer's v).
constexpr char kRwkv7Helpers[] = R"TS(
def _rwkv7_block(self, x: Tensor, v_first: Tensor, p: List[Tensor], first: bool, heads: int,
                 eps: float, state: List[Tensor], at: int) -> Tuple[Tensor, Tensor]:
    batch, time, c = x.size(0), x.size(1), x.size(2)
    n = c // heads
    if first:
        x = self._layernorm(x, p[0], p[1])
    a = self._layernorm(x, p[2], p[3])
    d = self._shifted(a, state[at]) - a
    r = self._rows(a + d * p[6], p[27])
    xw = a + d * p[7]
    k = self._rows(a + d * p[8], p[28])
    xv = a + d * p[9]
    v = self._rows(xv, p[29])
    w = torch.exp(torch.sigmoid(p[12] + self._rows(torch.tanh(self._rows(xw, p[13])), p[14]))
                  * -0.6065306597126334)
    if first:
        v_first = v
    else:
        v = v + (v_first - v) * torch.sigmoid(p[18] + self._rows(self._rows(xv, p[19]), p[20]))
    iclr = torch.sigmoid(p[15] + self._rows(self._rows(a + d * p[10], p[16]), p[17]))
    g = self._rows(torch.sigmoid(self._rows(a + d * p[11], p[21])), p[22])
    kk = (k * p[23]).view(batch, time, heads, n)
    kk = (kk / torch.clamp_min(torch.norm(kk, 2, [-1], True), 1e-12)).view(batch, time, c)
    k = k * (1.0 + (iclr - 1.0) * p[24])
    s = state[at + 1]
    target = kk * iclr
    outputs: List[Tensor] = []
    for t in range(time):
        removed = torch.matmul(s, kk[:, t].view(batch, heads, n, 1))
        s = (s * w[:, t].view(batch, heads, 1, n)
             - torch.matmul(removed, target[:, t].view(batch, heads, 1, n))
             + torch.matmul(v[:, t].view(batch, heads, n, 1), k[:, t].view(batch, heads, 1, n)))
        outputs.append(torch.matmul(s, r[:, t].view(batch, heads, n, 1)).view(batch, c))
    state[at + 1].copy_(s)
    o = torch.stack(outputs, 1).view(batch, time, heads, n)
    mean = o.mean(-1, keepdim=True)
    variance = (o - mean).pow(2).mean(-1, keepdim=True)
    y = ((o - mean) * torch.rsqrt(variance + eps)).view(batch, time, c) * p[26] + p[30]
    bonus = (r * k).view(batch, time, heads, n) * p[25]
    y = y + (bonus.sum(-1, keepdim=True) * v.view(batch, time, heads, n)).view(batch, time, c)
    h = x + self._rows(y * g, p[31])
    b = self._layernorm(h, p[4], p[5])
    ffn_in = b + (self._shifted(b, state[at + 2]) - b) * p[32]
    out = h + self._rows(torch.relu(self._rows(ffn_in, p[33])).pow(2), p[34])
    state[at].copy_(a[:, time - 1])
    state[at + 2].copy_(b[:, time - 1])
    return out, v_first
)TS";

// The names of block `layer`'s weights in _rwkv7_block's order; the ones a
// layer lacks (ln0 beyond layer 0, the value residual on layer 0) as "empty".
std::vector<std::string> BlockWeights(int64_t layer) {
  auto p = [layer](const std::string& name) { return BlockParam(layer, name); };
  const bool first = layer == 0;
  return {first ? p("ln0_gain") : "empty",
          first ? p("ln0_bias") : "empty",
          p("ln1_gain"),
          p("ln1_bias"),
          p("ln2_gain"),
          p("ln2_bias"),
          p("mix_r"),
          p("mix_w"),
          p("mix_k"),
          p("mix_v"),
          p("mix_i"),
          p("mix_g"),
          p("decay_bias"),
          p("decay_down_weight"),
          p("decay_up_weight"),
          p("iclr_bias"),
          p("iclr_down_weight"),
          p("iclr_up_weight"),
          first ? "empty" : p("value_bias"),
          first ? "empty" : p("value_down_weight"),
          first ? "empty" : p("value_up_weight"),
          p("gate_down_weight"),
          p("gate_up_weight"),
          p("key_norm_scale"),
          p("key_iclr_scale"),
          p("bonus"),
          p("out_norm_gain"),
          p("receptance_weight"),
          p("key_weight"),
          p("value_weight"),
          p("out_norm_bias"),
          p("output_weight"),
          p("ffn_mix"),
          p("ffn_key_weight"),
          p("ffn_value_weight")};
}

// "self.layers_L_NAME" for a model tensor "layers.L.NAME" ("ff.up.weight").
std::string LayerParam(int64_t layer, const std::string& name) {
  return "self." + ScriptTensorName(absl::StrCat("layers.", layer, ".", name));
}

bool IsMixerBlock(const LmConfig& c, int64_t layer) { return !IsWholeBlock(c.layer_mixer(layer)); }

// Whether some layer is a mixer block (norm, mixer, residual, norm, feed-forward, residual).
bool HasMixerBlocks(const LmConfig& c) {
  return c.mixer == MixerKind::kShortConv || c.has_attention();
}

int64_t KvHeads(const LmConfig& c) { return c.kv_heads > 0 ? c.kv_heads : c.gqa_heads(); }

// Layer `layer`'s state tensors, as init_state creates them.
std::vector<std::string> LayerStateInit(const LmConfig& c, int64_t layer) {
  auto zeros = [](auto... dims) {
    return absl::StrCat("torch.zeros([batch, ", absl::StrJoin({dims...}, ", "),
                        "], device=device)");
  };
  const int64_t d = c.d_model;
  switch (c.layer_mixer(layer)) {
    case MixerKind::kRwkv7: {
      const int64_t n = d / c.heads;
      return {zeros(d), zeros(c.heads, n, n), zeros(d)};
    }
    case MixerKind::kRwkv4:
      return {zeros(d), zeros(d), zeros(d),
              absl::StrCat("torch.full([batch, ", d, "], ", kRwkv4EmptyMax, ", device=device)"),
              zeros(d)};
    case MixerKind::kShortConv:
      return {zeros(c.conv_kernel - 1, d)};
    case MixerKind::kGqa: {
      const std::string cache = zeros(KvHeads(c), c.max_context, d / c.gqa_heads());
      return {cache, cache};
    }
    default: {  // mamba2
      const Mamba2Sizes& m = c.mamba2;
      const int64_t inner = m.expand * d;
      return {zeros(m.conv_kernel - 1, inner + 2 * m.groups * m.state_size),
              zeros(c.heads, inner / c.heads, m.state_size)};
    }
  }
}

// h + FF(Norm(h)), plus MoE(Norm(h)) where the model has experts beside the
// feed-forward: the second half of a mixer block and of a Mamba-2 block
// with whole_block_ff.
std::string FeedForwardLine(const LmConfig& c, int64_t l) {
  std::string code = absl::StrCat("    n = self._rmsnorm(h, ", LayerParam(l, "ff_norm.gain"), ", ",
                                  ScriptFloat(c.norm_eps), ")\n");
  if (c.ff == FeedForwardKind::kSwiGlu) {
    absl::StrAppend(&code, "    h = h + self._swiglu(n, ", LayerParam(l, "ff.gate.weight"), ", ",
                    LayerParam(l, "ff.up.weight"), ", ", LayerParam(l, "ff.down.weight"), ")");
  } else {
    absl::StrAppend(&code, "    h = h + self._feed_forward(n, ", LayerParam(l, "ff.up.weight"),
                    ", ", LayerParam(l, "ff.up.bias"), ", ", LayerParam(l, "ff.down.weight"), ", ",
                    LayerParam(l, "ff.down.bias"), ")");
  }
  if (c.moe.experts > 0) {
    std::vector<std::string> gates, ups, downs;
    for (int64_t e = 0; e < c.moe.experts; ++e) {
      const std::string expert = absl::StrCat("moe.experts.", e, ".");
      gates.push_back(LayerParam(l, expert + "gate.weight"));
      ups.push_back(LayerParam(l, expert + "up.weight"));
      downs.push_back(LayerParam(l, expert + "down.weight"));
    }
    absl::StrAppend(&code, " + self._experts(n, ", LayerParam(l, "moe.router.weight"), ", [",
                    absl::StrJoin(gates, ", "), "], [", absl::StrJoin(ups, ", "), "], [",
                    absl::StrJoin(downs, ", "), "], ", c.moe.top_k, ")");
  }
  return code + "\n";
}

// A short-conv or gqa layer: norm, mixer, residual, then the feed-forward.
std::string MixerBlockLines(const LmConfig& c, int64_t l, int64_t at) {
  const std::string state = absl::StrCat(", state, ", at, ")\n");
  std::string code = absl::StrCat("    x = self._rmsnorm(h, ", LayerParam(l, "mix_norm.gain"), ", ",
                                  ScriptFloat(c.norm_eps), ")\n");
  auto mixer = [l](const std::string& name) { return BlockParam(l, name); };
  if (c.layer_mixer(l) == MixerKind::kShortConv) {
    absl::StrAppend(&code, "    h = h + self._short_conv(x, ", mixer("in_proj_weight"), ", ",
                    mixer("conv_weight"), ", ", mixer("out_proj_weight"), state);
  } else {
    const std::string norms =
        c.qk_norm ? absl::StrCat(mixer("q_norm_gain"), ", ", mixer("k_norm_gain")) : "None, None";
    absl::StrAppend(&code, "    h = h + self._gqa(x, length, ", mixer("qkv_proj_weight"), ", ",
                    norms, ", ", mixer("out_proj_weight"), ", ", c.gqa_heads(), ", ", KvHeads(c),
                    ", ", ScriptFloat(c.rope ? c.rope_theta : 0.0), ", ", ScriptFloat(c.norm_eps),
                    ", ", c.max_context, state);
  }
  return absl::StrCat(code, FeedForwardLine(c, l));
}

// The lines that run layer `l` on h (state index `at` for its first tensor).
std::string BlockCall(const LmConfig& c, int64_t l, int64_t at) {
  if (IsMixerBlock(c, l)) return MixerBlockLines(c, l, at);
  const std::string state = absl::StrCat(", state, ", at, ")\n");
  switch (c.mixer) {
    case MixerKind::kRwkv7:
      return absl::StrCat("    h, v_first = self._rwkv7_block(h, v_first, [",
                          absl::StrJoin(BlockWeights(l), ", "), "], ", l == 0 ? "True" : "False",
                          ", ", c.heads, ", ", ScriptFloat(c.group_norm_eps), state);
    case MixerKind::kRwkv4: {
      const bool halve = c.rescale_every > 0 && (l + 1) % c.rescale_every == 0;
      return absl::StrCat("    h = self._rwkv4_block(h, [", absl::StrJoin(Rwkv4Weights(l), ", "),
                          "], ", l == 0 ? "True" : "False", ", ", halve ? "True" : "False", state);
    }
    default: {
      std::string code =
          absl::StrCat("    h = self._mamba2_block(h, [", absl::StrJoin(Mamba2Weights(l), ", "),
                       "], ", c.heads, ", ", c.mamba2.groups, ", ", c.mamba2.state_size, ", ",
                       c.mixer_options().chunk, ", ", ScriptFloat(c.norm_eps), state);
      if (c.whole_block_ff) absl::StrAppend(&code, FeedForwardLine(c, l));
      return code;
    }
  }
}

// The helpers of the kinds `c`'s layers have.
std::string KindHelpers(const LmConfig& c) {
  std::string helpers;
  switch (c.mixer) {
    case MixerKind::kRwkv7:
      helpers = kRwkv7Helpers;
      break;
    case MixerKind::kRwkv4:
      helpers = kRwkv4Helpers;
      break;
    case MixerKind::kMamba2:
      helpers = kMamba2Helpers;
      break;
    default:
      break;
  }
  return HasMixerBlocks(c) ? absl::StrCat(helpers, kMixerBlockHelpers) : helpers;
}

std::string FinalNormAndHead(const LmConfig& c) {
  const std::string head = c.tie_embeddings ? "self.embedding_weight" : "self.head_weight";
  const std::string final_norm =
      c.norm == NormKind::kRmsNorm
          ? absl::StrCat("    h = self._rmsnorm(h, self.final_norm_gain, ", ScriptFloat(c.norm_eps),
                         ")\n")
          : "    h = self._layernorm(h, self.final_norm_gain, self.final_norm_bias)\n";
  return absl::StrCat(final_norm,
                      "    state[0].add_(tokens.size(1))\n"
                      "    return self._rows(h, ",
                      head, ")\n");
}

}  // namespace

std::string ScriptFloat(double value) {
  std::string text = absl::StrFormat("%.17g", value);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

bool HasBlockTorchScriptMethods(const LmConfig& c) {
  return IsWholeBlock(c.mixer) || HasMixerBlocks(c);
}

bool BlockTorchScriptMethodsCover(const LmConfig& c) {
  if (HasMixerBlocks(c) || c.whole_block_ff) {
    return c.norm == NormKind::kRmsNorm && c.positions == PositionKind::kNone;
  }
  return c.norm == NormKind::kRmsNorm || c.norm_eps == 1e-5;
}

std::string BlockTorchScriptMethods(const LmConfig& c) {
  std::vector<std::string> init = {"torch.zeros([batch], device=device).long()"};
  std::string blocks;
  for (int64_t l = 0; l < c.layers; ++l) {
    const int64_t at = static_cast<int64_t>(init.size());
    for (std::string& tensor : LayerStateInit(c, l)) init.push_back(std::move(tensor));
    absl::StrAppend(&blocks, BlockCall(c, l, at));
  }
  return absl::StrCat(
      kBlockHelpers, KindHelpers(c),
      "\ndef init_state(self, batch: int) -> List[Tensor]:\n"
      "    device = self.embedding_weight.device\n"
      "    return [",
      absl::StrJoin(init, ",\n            "),
      "]\n"
      "\ndef _block_layers(self, tokens: Tensor, state: List[Tensor]) -> Tensor:\n"
      "    empty = torch.empty([0], device=tokens.device)\n"
      "    v_first = empty\n"
      "    length = state[0]\n"
      "    h = torch.embedding(self.embedding_weight, tokens)\n",
      blocks, FinalNormAndHead(c),
      "\ndef prefill(self, tokens: Tensor, state: List[Tensor]) -> Tuple[Tensor, List[Tensor]]:\n"
      "    length = state[0]\n"
      "    assert tokens.size(0) == 0 or bool((length == length[0]).all()), "
      "\"prefill: every row must be at the same length\"\n"
      "    return self._block_layers(tokens, state), state\n"
      "\ndef step(self, tokens: Tensor, state: List[Tensor]) -> Tuple[Tensor, List[Tensor]]:\n"
      "    return self._block_layers(tokens.unsqueeze(1), state).squeeze(1), state\n"
      "\ndef forward(self, tokens: Tensor) -> Tensor:\n"
      "    return self.prefill(tokens, self.init_state(tokens.size(0)))[0]\n");
}

}  // namespace attn
