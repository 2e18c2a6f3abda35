"""Opens a model package with Python's torch.jit.load and checks its contents
against its own config: the format version, the config JSON, the tokenizer
bytes, and the shape of every tensor the config implies.

usage: /usr/bin/python3 check_package.py MODEL.pt
"""
import json
import sys

import torch


def main(path):
    archive = torch.jit.load(path)
    assert archive.format_version == 1, f"format_version {archive.format_version}"
    config = json.loads(archive.config)
    buffers = dict(archive.named_buffers())
    tokenizer = buffers.pop("tokenizer")
    assert tokenizer.dtype == torch.uint8 and tokenizer.numel() > 0, "tokenizer bytes"
    d, vocab, layers = config["d_model"], config["vocab_size"], config["layers"]
    assert buffers["embedding.weight"].shape == (vocab, d), buffers["embedding.weight"].shape
    for layer in range(layers):
        prefix = f"layers.{layer}."
        assert buffers[prefix + "mixer.in_proj.weight"].shape == (3 * d, d)
        assert buffers[prefix + "ff.up.weight"].shape == (config["ff_hidden"], d)
    count = sum(t.numel() for t in buffers.values())
    assert all(torch.isfinite(t).all() for t in buffers.values() if t.is_floating_point())
    print(f"{path}: {config['mixer']} model, {layers} layers, {count} parameter values, "
          f"{tokenizer.numel()} tokenizer bytes: OK")


if __name__ == "__main__":
    main(sys.argv[1])
