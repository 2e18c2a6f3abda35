"""Writes a TorchScript model that answers by a script, for the tool-calling
tests: a byte-level model (tokenizer "bytes") that keeps docs/model-contract.md
and, after the prompt's last CUE, writes FIRST, or AFTER once TRIGGER has
appeared anywhere in the sequence (a tool's result), then its end of
sequence. It is a finite automaton over the bytes, so forward, prefill and
a loop of step give the same logits, as the contract asks; a state is a few
integers.

usage: /usr/bin/python3 make_scripted_model.py OUT.pt --cue TEXT --first TEXT
           --after TEXT --trigger TEXT [--chat_template FILE]
--chat_template records a Jinja template in the model's config, as
attn-export records a model's own.
"""
import argparse
import json
from typing import List, Tuple

import torch
from torch import Tensor, nn

VOCAB = 257  # bytes and an end of sequence
EOS = 256


def as_bytes(text: str) -> Tensor:
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.int64)


class Scripted(nn.Module):
    config: str

    def __init__(self, config: str, cue: str, first: str, after: str, trigger: str):
        super().__init__()
        self.config = config
        self.register_buffer("cue", as_bytes(cue))
        self.register_buffer("first", as_bytes(first))
        self.register_buffer("after", as_bytes(after))
        self.register_buffer("trigger", as_bytes(trigger))

    def reply(self, found: int) -> Tensor:
        return self.after if found == 1 else self.first

    def advance(self, s: List[int], token: int) -> List[int]:
        # s: [cue matched, trigger matched, found, reply position (-1: none)]
        cue = self.cue
        trigger = self.trigger
        position = s[3]
        if position >= 0:
            text = self.reply(s[2])
            position = position + 1 if position < text.size(0) and token == int(text[position]) else -1
        matched = s[0] + 1 if token == int(cue[s[0]]) else (1 if token == int(cue[0]) else 0)
        if matched == cue.size(0):
            matched = 0
            position = 0
        hit = s[1] + 1 if token == int(trigger[s[1]]) else (1 if token == int(trigger[0]) else 0)
        found = s[2]
        if hit == trigger.size(0):
            hit = 0
            found = 1
        return [matched, hit, found, position]

    def logits_of(self, s: List[int]) -> Tensor:
        out = torch.zeros([257])  # bytes and the end of sequence, 256
        target = 32  # a space while not replying
        if s[3] >= 0:
            text = self.reply(s[2])
            target = int(text[s[3]]) if s[3] < text.size(0) else 256
        out[target] = 100.0
        return out

    @torch.jit.export
    def init_state(self, batch: int) -> List[Tensor]:
        start = torch.tensor([0, 0, 0, -1], dtype=torch.int64)
        return [start.repeat(batch, 1)]

    @torch.jit.export
    def prefill(self, tokens: Tensor, state: List[Tensor]) -> Tuple[Tensor, List[Tensor]]:
        rows: List[Tensor] = []
        for b in range(tokens.size(0)):
            s = torch.jit.annotate(List[int], state[0][b].tolist())
            per_token: List[Tensor] = []
            for t in torch.jit.annotate(List[int], tokens[b].tolist()):
                s = self.advance(s, t)
                per_token.append(self.logits_of(s))
            state[0][b] = torch.tensor(s, dtype=torch.int64)
            rows.append(torch.stack(per_token))
        return torch.stack(rows), state

    @torch.jit.export
    def step(self, tokens: Tensor, state: List[Tensor]) -> Tuple[Tensor, List[Tensor]]:
        logits, state = self.prefill(tokens.unsqueeze(1), state)
        return logits.squeeze(1), state

    def forward(self, tokens: Tensor) -> Tensor:
        logits, _ = self.prefill(tokens, self.init_state(tokens.size(0)))
        return logits


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    for flag in ("--cue", "--first", "--after", "--trigger"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--chat_template", default="")
    args = parser.parse_args()
    config = {"vocab_size": VOCAB, "eos_id": EOS, "max_context": None,
              "state_bytes_per_sequence": 32, "tokenizer": "bytes"}
    if args.chat_template:
        with open(args.chat_template, encoding="utf-8") as f:
            config["chat_template"] = {"source": args.chat_template.split("/")[-1],
                                       "templates": {"default": f.read()}}
    model = Scripted(json.dumps(config), args.cue, args.first, args.after, args.trigger)
    torch.jit.script(model).save(args.out)


if __name__ == "__main__":
    main()
