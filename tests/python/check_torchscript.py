"""Runs the TorchScript methods of model packages in Python, with nothing of
the project installed: for each NAME.pt beside NAME.expected (token ids on
the first line, the C++ model's logits on the second), forward must equal
the C++ logits, and a step loop from init_state must equal forward.

usage: /usr/bin/python3 check_torchscript.py DIR
"""
import json
import pathlib
import sys

import torch

# Relative to the largest logit (at least 1), as the C++ test bounds them.
TOLERANCE = 1e-5


def check(package, expected):
    lines = expected.read_text().splitlines()
    module = torch.jit.load(str(package))
    config = json.loads(module.config)
    for field in ("vocab_size", "eos_id", "max_context", "state_bytes_per_sequence", "tokenizer"):
        assert field in config, f"{package}: config lacks {field}"
    tokens = torch.tensor([int(t) for t in lines[0].split()]).view(2, -1)
    vocab = config["vocab_size"]
    native = torch.tensor([float(x) for x in lines[1].split()]).view(2, -1, vocab)
    with torch.no_grad():
        logits = module.forward(tokens)
        scale = max(1.0, native.abs().max().item())
        error = (logits - native).abs().max().item() / scale
        assert error < TOLERANCE, f"{package}: forward differs from C++ by {error}"
        state = module.init_state(2)
        assert all(t.size(0) == 2 for t in state), f"{package}: a state tensor lacks dim 0"
        worst = 0.0
        for t in range(tokens.size(1)):
            step_logits, state = module.step(tokens[:, t], state)
            worst = max(worst, (step_logits - logits[:, t]).abs().max().item() / scale)
        assert worst < TOLERANCE, f"{package}: step loop differs from forward by {worst}"
    print(f"{package.name}: forward within {error:.1e} of C++, steps within {worst:.1e}: OK")


def main(directory):
    packages = sorted(pathlib.Path(directory).glob("*.pt"))
    assert packages, f"no packages in {directory}"
    for package in packages:
        check(package, package.with_suffix(".expected"))


if __name__ == "__main__":
    main(sys.argv[1])
