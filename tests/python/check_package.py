"""Opens a model package with Python's torch.jit.load and checks its contents
against its own config: the format version, the config JSON, the tokenizer
bytes, the shape of every tensor the config implies, and that its methods
run: forward's logits equal a step loop's.

usage: /usr/bin/python3 check_package.py MODEL.pt
"""
import json
import sys

import torch


def main(path):
    archive = torch.jit.load(path)
    assert archive.format_version == 2, f"format_version {archive.format_version}"
    contract = json.loads(archive.config)
    config = contract["lm"]
    assert contract["vocab_size"] == config["vocab_size"]
    buffers = dict(archive.named_buffers())
    tokenizer = buffers.pop("tokenizer")
    assert tokenizer.dtype == torch.uint8 and tokenizer.numel() > 0, "tokenizer bytes"
    d, vocab, layers = config["d_model"], config["vocab_size"], config["layers"]
    assert buffers["embedding_weight"].shape == (vocab, d), buffers["embedding_weight"].shape
    for layer in range(layers):
        prefix = f"layers_{layer}_"
        assert buffers[prefix + "mixer_in_proj_weight"].shape == (3 * d, d)
        assert buffers[prefix + "ff_up_weight"].shape == (config["ff_hidden"], d)
    count = sum(t.numel() for t in buffers.values())
    assert all(torch.isfinite(t).all() for t in buffers.values() if t.is_floating_point())
    tokens = torch.randint(0, vocab, (1, 12))
    with torch.no_grad():
        logits = archive.forward(tokens)
        state = archive.init_state(1)
        for t in range(tokens.size(1)):
            step_logits, state = archive.step(tokens[:, t], state)
            error = (step_logits - logits[:, t]).abs().max().item()
            assert error < 1e-5, f"step {t} differs from forward by {error}"
    print(f"{path}: {config['mixer']} model, {layers} layers, {count} parameter values, "
          f"{tokenizer.numel()} tokenizer bytes: OK")


if __name__ == "__main__":
    main(sys.argv[1])
