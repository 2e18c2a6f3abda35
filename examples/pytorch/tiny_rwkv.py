"""A recurrent language model in plain PyTorch, saved so that attn-server
serves it (docs/model-contract.md). Nothing here comes from this project's
C++ library: the server runs the module's own TorchScript methods.

The model is RWKV-4 style (Peng et al. 2023): each layer mixes time with a
WKV recurrence, which is AFT with a learned per-channel decay w and a bonus
u for the current token,

    wkv_t = (sum_{i<t} e^{-(t-1-i) w + k_i} v_i + e^{u + k_t} v_t)
          / (sum_{i<t} e^{-(t-1-i) w + k_i}     + e^{u + k_t}),

kept as running sums (a, b) relative to a running maximum p, and mixes
channels with a squared-ReLU feed-forward. Both halves see the previous
token through a learned "token shift". Tokens are UTF-8 bytes (ids 0..255),
256 ends a sequence.

    /usr/bin/python3 tiny_rwkv.py --output rwkv.pt [--seed 1] [--d_model 64] [--layers 2]

writes a randomly initialised model (train it with any PyTorch loop first
for useful text); attn-server --models=rwkv.pt serves it.
"""
import argparse
import json
from typing import List, Tuple

import torch
from torch import Tensor, nn

VOCAB = 257  # bytes, then end-of-sequence
EOS = 256


def project(x: Tensor, weight: Tensor) -> Tensor:
    """x @ weight.T for x [B, in], weight [out, in].

    One row goes through torch.mv: in Debian's torch 1.13 with OpenBLAS a
    one-row F.linear (a matrix product of one row) costs about 12 times a
    matrix-vector product on a 4096x1024 weight (docs/model-contract.md,
    "Speed"), and a decode step at batch 1 is made of such rows.
    """
    if x.size(0) == 1:
        return torch.mv(weight, x[0]).unsqueeze(0)
    return torch.nn.functional.linear(x, weight)


class TimeMix(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.decay = nn.Parameter(torch.randn(d) * 0.5 - 1.0)  # w = exp(decay) > 0
        self.bonus = nn.Parameter(torch.randn(d) * 0.5)  # u
        self.mix_k = nn.Parameter(torch.rand(d))
        self.mix_v = nn.Parameter(torch.rand(d))
        self.mix_r = nn.Parameter(torch.rand(d))
        self.key = nn.Linear(d, d, bias=False)
        self.value = nn.Linear(d, d, bias=False)
        self.receptance = nn.Linear(d, d, bias=False)
        self.output = nn.Linear(d, d, bias=False)

    def forward(self, x: Tensor, last: Tensor, a: Tensor, b: Tensor,
                p: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """One token per row: x [B, d]; returns the output and the new state."""
        k = project(x * self.mix_k + last * (1 - self.mix_k), self.key.weight)
        v = project(x * self.mix_v + last * (1 - self.mix_v), self.value.weight)
        r = torch.sigmoid(project(x * self.mix_r + last * (1 - self.mix_r), self.receptance.weight))
        ww = self.bonus + k
        q = torch.maximum(p, ww)
        e1, e2 = torch.exp(p - q), torch.exp(ww - q)
        wkv = (e1 * a + e2 * v) / (e1 * b + e2)
        ww = p - torch.exp(self.decay)
        q = torch.maximum(ww, k)
        e1, e2 = torch.exp(ww - q), torch.exp(k - q)
        return project(r * wkv, self.output.weight), x, e1 * a + e2 * v, e1 * b + e2, q


class ChannelMix(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.mix_k = nn.Parameter(torch.rand(d))
        self.mix_r = nn.Parameter(torch.rand(d))
        self.key = nn.Linear(d, 4 * d, bias=False)
        self.value = nn.Linear(4 * d, d, bias=False)
        self.receptance = nn.Linear(d, d, bias=False)

    def forward(self, x: Tensor, last: Tensor) -> Tuple[Tensor, Tensor]:
        k = torch.relu(project(x * self.mix_k + last * (1 - self.mix_k), self.key.weight)) ** 2
        r = torch.sigmoid(project(x * self.mix_r + last * (1 - self.mix_r), self.receptance.weight))
        return r * project(k, self.value.weight), x


class Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.time = TimeMix(d)
        self.norm2 = nn.LayerNorm(d)
        self.channel = ChannelMix(d)

    def forward(self, h: Tensor, state: List[Tensor], first: int) -> Tensor:
        """One token per row; updates state[first:first + 5] in place."""
        y, last, a, b, p = self.time(self.norm1(h), state[first], state[first + 1],
                                     state[first + 2], state[first + 3])
        h = h + y
        for i, t in enumerate([last, a, b, p]):
            state[first + i].copy_(t)
        y, last = self.channel(self.norm2(h), state[first + 4])
        state[first + 4].copy_(last)
        return h + y


class TinyRwkv(nn.Module):
    # The serving contract's config (docs/model-contract.md), as JSON.
    config: str

    def __init__(self, d_model: int = 64, layers: int = 2):
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(VOCAB, d_model)
        self.blocks = nn.ModuleList([Block(d_model) for _ in range(layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB, bias=False)
        self.config = json.dumps({
            "vocab_size": VOCAB, "eos_id": EOS, "max_context": None,
            "state_bytes_per_sequence": 5 * layers * d_model * 4, "tokenizer": "bytes"})

    @torch.jit.export
    def init_state(self, batch: int) -> List[Tensor]:
        """Per layer: time-mix last x, a, b, p; channel-mix last x. Each [batch, d]."""
        device = self.embedding.weight.device
        state: List[Tensor] = []
        for _ in self.blocks:
            for i in range(5):
                fill = -1e38 if i == 3 else 0.0  # p starts below any key
                state.append(torch.full([batch, self.d_model], fill, device=device))
        return state

    @torch.jit.export
    def step(self, tokens: Tensor, state: List[Tensor]) -> Tuple[Tensor, List[Tensor]]:
        """tokens [B] -> logits [B, V]; each row continues its own sequence."""
        h = self.embedding(tokens)
        for index, block in enumerate(self.blocks):
            h = block(h, state, 5 * index)
        return project(self.norm(h), self.head.weight), state

    @torch.jit.export
    def prefill(self, tokens: Tensor, state: List[Tensor]) -> Tuple[Tensor, List[Tensor]]:
        """tokens [B, T] -> logits [B, T, V]: the recurrence, token by token."""
        logits: List[Tensor] = []
        for t in range(tokens.size(1)):
            step_logits, state = self.step(tokens[:, t], state)
            logits.append(step_logits)
        return torch.stack(logits, 1), state

    def forward(self, tokens: Tensor) -> Tensor:
        return self.prefill(tokens, self.init_state(tokens.size(0)))[0]


def build(seed: int, d_model: int = 64, layers: int = 2) -> torch.jit.ScriptModule:
    torch.manual_seed(seed)
    model = TinyRwkv(d_model, layers).eval()
    with torch.no_grad():  # larger logits than the initialisation gives: clear greedy choices
        model.head.weight.mul_(8.0)
    return torch.jit.script(model)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--d_model", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    args = parser.parse_args()
    module = build(args.seed, args.d_model, args.layers)
    module.save(args.output)
    print(f"wrote {args.output}: {sum(p.numel() for p in module.parameters())} parameters")


if __name__ == "__main__":
    main()
