#include "model/lm/torchscript_rwkv7.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace attn {
namespace {

// One RWKV-7 block over x [B, T, C] (model/mixers/rwkv7.h), continuing the
// state tensors state[at] (att_shift), state[at + 1] (S [B, H, N, N]) and
// state[at + 2] (ffn_shift) in place. p holds the block's weights in the
// order of BlockWeights below (empty tensors where a layer has none).
// Returns the block's output and the value residual (the first layer's v).
constexpr char kRwkv7Helpers[] = R"TS(
def _rows(self, x: Tensor, w: Tensor) -> Tensor:
    return self._dense(x.reshape(-1, x.size(-1)), w, None).reshape(x.size(0), x.size(1), -1)

def _shifted(self, x: Tensor, shift: Tensor) -> Tensor:
    return torch.cat([shift.unsqueeze(1), x.narrow(1, 0, x.size(1) - 1)], 1)

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
  auto p = [layer](const std::string& name) {
    return absl::StrCat("self.layers_", layer, "_mixer_", name);
  };
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

}  // namespace

std::string Rwkv7TorchScriptMethods(const LmConfig& c) {
  const int64_t n = c.d_model / c.heads;
  std::vector<std::string> init = {"torch.zeros([batch], device=device).long()"};
  for (int64_t l = 0; l < c.layers; ++l) {
    init.push_back(absl::StrCat("torch.zeros([batch, ", c.d_model, "], device=device)"));
    init.push_back(
        absl::StrCat("torch.zeros([batch, ", c.heads, ", ", n, ", ", n, "], device=device)"));
    init.push_back(absl::StrCat("torch.zeros([batch, ", c.d_model, "], device=device)"));
  }
  std::string blocks;
  for (int64_t l = 0; l < c.layers; ++l) {
    absl::StrAppend(&blocks, "    h, v_first = self._rwkv7_block(h, v_first, [",
                    absl::StrJoin(BlockWeights(l), ", "), "], ", l == 0 ? "True" : "False", ", ",
                    c.heads, ", ", absl::StrCat(c.group_norm_eps), ", state, ", 1 + 3 * l, ")\n");
  }
  const std::string head = c.tie_embeddings ? "self.embedding_weight" : "self.head_weight";
  return absl::StrCat(
      kRwkv7Helpers,
      "\ndef init_state(self, batch: int) -> List[Tensor]:\n"
      "    device = self.embedding_weight.device\n"
      "    return [",
      absl::StrJoin(init, ",\n            "),
      "]\n"
      "\ndef _rwkv7_layers(self, tokens: Tensor, state: List[Tensor]) -> Tensor:\n"
      "    empty = torch.empty([0], device=tokens.device)\n"
      "    v_first = empty\n"
      "    h = torch.embedding(self.embedding_weight, tokens)\n",
      blocks,
      "    h = self._layernorm(h, self.final_norm_gain, self.final_norm_bias)\n"
      "    state[0].add_(tokens.size(1))\n"
      "    return self._rows(h, ",
      head,
      ")\n"
      "\ndef prefill(self, tokens: Tensor, state: List[Tensor]) -> Tuple[Tensor, List[Tensor]]:\n"
      "    length = state[0]\n"
      "    assert tokens.size(0) == 0 or bool((length == length[0]).all()), "
      "\"prefill: every row must be at the same length\"\n"
      "    return self._rwkv7_layers(tokens, state), state\n"
      "\ndef step(self, tokens: Tensor, state: List[Tensor]) -> Tuple[Tensor, List[Tensor]]:\n"
      "    return self._rwkv7_layers(tokens.unsqueeze(1), state).squeeze(1), state\n"
      "\ndef forward(self, tokens: Tensor) -> Tensor:\n"
      "    return self.prefill(tokens, self.init_state(tokens.size(0)))[0]\n");
}

}  // namespace attn
