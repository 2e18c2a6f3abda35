"""Writes small TorchScript models for the server's contract checks
(docs/model-contract.md) into DIR:

  counter.pt      keeps the contract: the next byte is the current one plus 1,
                  and step raises for byte 33 ('!')
  no_step.pt      lacks step
  bad_state.pt    init_state's tensor does not have the sequence in dim 0
  bad_logits.pt   step returns logits of the wrong shape
  no_config.pt    lacks the config attribute

usage: /usr/bin/python3 make_contract_models.py DIR
"""
import json
import sys
from typing import List, Tuple

import torch
from torch import Tensor, nn

CONFIG = json.dumps({"vocab_size": 257, "eos_id": 256, "max_context": None,
                     "state_bytes_per_sequence": 8, "tokenizer": "bytes"})


class Counter(nn.Module):
    config: str

    def __init__(self):
        super().__init__()
        self.config = CONFIG

    def logits_after(self, tokens: Tensor) -> Tensor:
        return torch.nn.functional.one_hot((tokens + 1) % 256, 257).float() * 10.0

    @torch.jit.export
    def init_state(self, batch: int) -> List[Tensor]:
        return [torch.zeros([batch], dtype=torch.int64)]

    @torch.jit.export
    def step(self, tokens: Tensor, state: List[Tensor]) -> Tuple[Tensor, List[Tensor]]:
        if bool((tokens == 33).any()):
            raise RuntimeError("byte 33 is not allowed here")
        state[0].add_(1)
        return self.logits_after(tokens), state

    @torch.jit.export
    def prefill(self, tokens: Tensor, state: List[Tensor]) -> Tuple[Tensor, List[Tensor]]:
        state[0].add_(tokens.size(1))
        return self.logits_after(tokens), state

    def forward(self, tokens: Tensor) -> Tensor:
        return self.logits_after(tokens)


class NoStep(nn.Module):
    config: str

    def __init__(self):
        super().__init__()
        self.config = CONFIG

    @torch.jit.export
    def init_state(self, batch: int) -> List[Tensor]:
        return [torch.zeros([batch])]

    @torch.jit.export
    def prefill(self, tokens: Tensor, state: List[Tensor]) -> Tuple[Tensor, List[Tensor]]:
        return torch.zeros([tokens.size(0), tokens.size(1), 257]), state

    def forward(self, tokens: Tensor) -> Tensor:
        return torch.zeros([tokens.size(0), tokens.size(1), 257])


class BadState(Counter):
    @torch.jit.export
    def init_state(self, batch: int) -> List[Tensor]:
        return [torch.zeros([1, batch])]


class BadLogits(Counter):
    @torch.jit.export
    def step(self, tokens: Tensor, state: List[Tensor]) -> Tuple[Tensor, List[Tensor]]:
        return torch.zeros([tokens.size(0), 100]), state


class NoConfig(nn.Module):
    def forward(self, tokens: Tensor) -> Tensor:
        return tokens.float()


def main(directory):
    for name, module in [("counter", Counter()), ("no_step", NoStep()),
                         ("bad_state", BadState()), ("bad_logits", BadLogits()),
                         ("no_config", NoConfig())]:
        torch.jit.script(module).save(f"{directory}/{name}.pt")


if __name__ == "__main__":
    main(sys.argv[1])
