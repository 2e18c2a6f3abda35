"""Mamba-2, RWKV-4, LFM2 and Granite 4.0-H checkpoints in Hugging Face's public
layouts, with random weights, a byte-level BPE tokenizer.json in GPT-NeoX's
layout, and float64 references of the models written from their papers'
equations (LFM2 and Granite: lfm2_checkpoints.py and granite_checkpoints.py,
from transformers' modeling code).

    hf_checkpoints.py write --family mamba2|mamba2-ssm|rwkv4|lfm2|granite --out DIR
        [--format safetensors|sharded|bin --dtype float32|float16|bfloat16 --seed 1
         --d 48 --layers 2 --vocab 544 --tokenizer FILE --shape mamba2-130m|rwkv4-169m]
    hf_checkpoints.py tokenizer --out FILE      a BPE trained here on a small corpus
    hf_checkpoints.py logits --dir DIR --tokens 1,2,3     float64 logits (JSON)

mamba2 is transformers' Mamba2ForCausalLM layout (config.json model_type
"mamba2", time_step_limit written with Python's Infinity literal);
mamba2-ssm is mamba_ssm's (d_model, n_layer, ssm_cfg; tied head stored
twice in pytorch_model.bin); rwkv4 is RwkvForCausalLM's (rescale_every 2).
--shape writes the public models' sizes (mamba2-130m, rwkv-4-169m-pile) for
benchmarks. The references read the checkpoint files back (safetensors
parsed here, .bin with torch.load) and apply RWKV-4's rescale_every as
transformers does at inference: weights divided, hidden state halved.
"""
import argparse
import collections
import importlib.util
import json
import math
import os
import re
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("rwkv7_checkpoints", os.path.join(HERE, "rwkv7_checkpoints.py"))
rwkv7_tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rwkv7_tool)
_spec = importlib.util.spec_from_file_location("lfm2_checkpoints", os.path.join(HERE, "lfm2_checkpoints.py"))
lfm2_tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lfm2_tool)
_spec = importlib.util.spec_from_file_location("granite_checkpoints",
                                               os.path.join(HERE, "granite_checkpoints.py"))
granite_tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(granite_tool)

SHAPES = {
    "mamba2-130m": dict(d=768, layers=24, vocab=50288, state=128, groups=1, head_dim=64, conv=4),
    "rwkv4-169m": dict(d=768, layers=12, vocab=50277, ffn=3072),
}


# --- writers ---

def mamba2_state_dict(d, layers, vocab, state, groups, head_dim, conv, seed, embedding_name):
    g = torch.Generator().manual_seed(seed)
    rand = lambda *shape, scale=1.0: torch.randn(*shape, generator=g) * scale
    inner, heads = 2 * d, 2 * d // head_dim
    sd = collections.OrderedDict()
    sd[embedding_name] = rand(vocab, d)
    for l in range(layers):
        b = f"backbone.layers.{l}."
        sd[b + "norm.weight"] = 1 + rand(d, scale=0.1)
        sd[b + "mixer.in_proj.weight"] = rand(2 * inner + 2 * groups * state + heads, d, scale=d ** -0.5)
        sd[b + "mixer.conv1d.weight"] = rand(inner + 2 * groups * state, 1, conv, scale=0.5)
        sd[b + "mixer.conv1d.bias"] = rand(inner + 2 * groups * state, scale=0.1)
        sd[b + "mixer.dt_bias"] = rand(heads, scale=1.0) - 2.0
        sd[b + "mixer.A_log"] = torch.log(1 + 15 * torch.rand(heads, generator=g))
        sd[b + "mixer.D"] = 1 + rand(heads, scale=0.3)
        sd[b + "mixer.norm.weight"] = 1 + rand(inner, scale=0.1)
        sd[b + "mixer.out_proj.weight"] = rand(d, inner, scale=inner ** -0.5)
    sd["backbone.norm_f.weight"] = 1 + rand(d, scale=0.1)
    return sd


def rwkv4_state_dict(d, layers, vocab, ffn, seed):
    g = torch.Generator().manual_seed(seed)
    rand = lambda *shape, scale=1.0: torch.randn(*shape, generator=g) * scale
    uni = lambda *shape: torch.rand(*shape, generator=g)
    sd = collections.OrderedDict()
    sd["rwkv.embeddings.weight"] = rand(vocab, d)
    for l in range(layers):
        b = f"rwkv.blocks.{l}."
        norms = ["pre_ln", "ln1", "ln2"] if l == 0 else ["ln1", "ln2"]
        for n in norms:
            sd[b + n + ".weight"] = 1 + rand(d, scale=0.1)
            sd[b + n + ".bias"] = rand(d, scale=0.1)
        a = b + "attention."
        sd[a + "time_decay"] = rand(d, scale=1.5)
        sd[a + "time_first"] = rand(d, scale=0.5)
        for n in ("key", "value", "receptance"):
            sd[a + "time_mix_" + n] = uni(1, 1, d)
        for n in ("key", "value", "receptance", "output"):
            sd[a + n + ".weight"] = rand(d, d, scale=d ** -0.5)
        f = b + "feed_forward."
        sd[f + "time_mix_key"] = uni(1, 1, d)
        sd[f + "time_mix_receptance"] = uni(1, 1, d)
        sd[f + "key.weight"] = rand(ffn, d, scale=d ** -0.5)
        sd[f + "receptance.weight"] = rand(d, d, scale=d ** -0.5)
        sd[f + "value.weight"] = rand(d, ffn, scale=ffn ** -0.5)
    sd["rwkv.ln_out.weight"] = 1 + rand(d, scale=0.1)
    sd["rwkv.ln_out.bias"] = rand(d, scale=0.1)
    sd["head.weight"] = rand(vocab, d, scale=d ** -0.5)
    return sd


def save_weights(out, sd, form):
    if form == "bin":
        torch.save(sd, os.path.join(out, "pytorch_model.bin"))
    elif form == "safetensors":
        rwkv7_tool.write_safetensors(os.path.join(out, "model.safetensors"), sd)
    else:
        names = list(sd)
        halves = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
                  "model-00002-of-00002.safetensors": names[len(names) // 2:]}
        weight_map = {}
        for file, part in halves.items():
            rwkv7_tool.write_safetensors(os.path.join(out, file),
                                         collections.OrderedDict((n, sd[n]) for n in part))
            weight_map.update({n: file for n in part})
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f)


def write(args):
    os.makedirs(args.out, exist_ok=True)
    dtype = getattr(torch, args.dtype)
    size = dict(d=args.d, layers=args.layers, vocab=args.vocab, state=16, groups=2, head_dim=16,
                conv=4, ffn=2 * args.d)
    size.update(SHAPES.get(args.shape, {}))
    if args.family == "lfm2":
        sd, config = lfm2_tool.write(args, size)
    elif args.family == "granite":
        sd, config = granite_tool.write(args, size)
    elif args.family == "rwkv4":
        sd = rwkv4_state_dict(size["d"], size["layers"], size["vocab"], size["ffn"], args.seed)
        config = {"model_type": "rwkv", "architectures": ["RwkvForCausalLM"], "vocab_size": size["vocab"],
                  "context_length": 1024, "hidden_size": size["d"], "num_hidden_layers": size["layers"],
                  "attention_hidden_size": size["d"], "intermediate_size": size["ffn"],
                  "layer_norm_epsilon": 1e-5, "bos_token_id": 0, "eos_token_id": 0,
                  "rescale_every": 2 if not args.shape else 6, "tie_word_embeddings": False,
                  "use_cache": True}
    else:
        ssm = args.family == "mamba2-ssm"
        embedding = "backbone.embedding.weight" if ssm else "backbone.embeddings.weight"
        sd = mamba2_state_dict(size["d"], size["layers"], size["vocab"], size["state"], size["groups"],
                               size["head_dim"], size["conv"], args.seed, embedding)
        if ssm:
            sd["lm_head.weight"] = sd[embedding]  # tied: the same storage under both names
            config = {"d_model": size["d"], "d_intermediate": 0, "n_layer": size["layers"],
                      "vocab_size": size["vocab"] - 11,
                      "ssm_cfg": {"layer": "Mamba2", "d_state": size["state"], "d_conv": size["conv"],
                                  "expand": 2, "headdim": size["head_dim"], "ngroups": size["groups"]},
                      "attn_layer_idx": [], "attn_cfg": {}, "rms_norm": True, "residual_in_fp32": True,
                      "fused_add_norm": True, "pad_vocab_size_multiple": 16, "tie_embeddings": True}
        else:
            config = {"model_type": "mamba2", "architectures": ["Mamba2ForCausalLM"],
                      "hidden_size": size["d"], "num_hidden_layers": size["layers"],
                      "vocab_size": size["vocab"], "state_size": size["state"], "expand": 2,
                      "conv_kernel": size["conv"], "n_groups": size["groups"], "head_dim": size["head_dim"],
                      "num_heads": 2 * size["d"] // size["head_dim"], "layer_norm_epsilon": 1e-5,
                      "use_bias": False, "use_conv_bias": True, "hidden_act": "silu",
                      "residual_in_fp32": True, "rms_norm": True, "chunk_size": 256,
                      "time_step_limit": [0.0, float("inf")], "time_step_min": 0.001,
                      "time_step_max": 0.1, "tie_word_embeddings": True, "eos_token_id": 0,
                      "bos_token_id": 0, "pad_token_id": 1}
    if args.loud_padding and args.family == "mamba2-ssm":
        # The rows past the tokenizer's ids (mamba_ssm pads the vocabulary
        # to a multiple of 16) as strong as +-30 times a real row, so that
        # under the tied head one of them wins every step unless masked.
        table = sd["backbone.embedding.weight"]
        for i, row in enumerate(range(config["vocab_size"], size["vocab"])):
            table[row] = (30.0 if i % 2 == 0 else -30.0) * table[5]
    sd = collections.OrderedDict((k, v.to(dtype)) for k, v in sd.items())
    if args.family == "mamba2-ssm":
        sd["lm_head.weight"] = sd["backbone.embedding.weight"]
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f)  # Python writes Infinity for inf, as public configs show
    save_weights(args.out, sd, args.format)
    if args.tokenizer:
        with open(args.tokenizer) as src, open(os.path.join(args.out, "tokenizer.json"), "w") as dst:
            dst.write(src.read())


# --- a byte-level BPE tokenizer.json in GPT-NeoX's layout ---

def byte_characters():
    """GPT-2's byte -> character table (printable Latin-1 bytes stand for themselves)."""
    printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or b >= 174]
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


CORPUS = ("The quick brown fox jumps over the lazy dog. It's the river's bank; they're here, "
          "we've seen it, I'm sure you'll agree and he'd say so.\n\n" * 3 +
          "def encode(self, text):\n    return [self.vocab[t] for t in text.split()]\n\n"
          "    for i in range(10):\n        print(i, i * 2)\n" +
          "日本語のテキストと中文文本，한국어 텍스트。 Ünïcödé café naïve résumé. " * 2 +
          "emoji 🙂🙃👍🏽 and numbers 12345 67890 3.14159 2026-11-26.\n\t\ttabs  and   spaces    ")


def train_bpe(corpus, merges_wanted):
    table = byte_characters()
    words = re.findall(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+", corpus)
    counts = collections.Counter("".join(table[b] for b in w.encode()) for w in words)
    split = {w: list(w) for w in counts}
    merges = []
    for _ in range(merges_wanted):
        pairs = collections.Counter()
        for w, n in counts.items():
            parts = split[w]
            for a, b in zip(parts, parts[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append((a, b))
        for w in counts:
            parts, out, i = split[w], [], 0
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            split[w] = out
    return merges


def write_tokenizer(path):
    table = byte_characters()
    vocab = {"<|endoftext|>": 0, "<|padding|>": 1}
    for b in range(256):
        vocab[table[b]] = len(vocab)
    merges = train_bpe(CORPUS, 300)
    for a, b in merges:
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
    added = [{"id": 0, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True},
             {"id": 1, "content": "<|padding|>", "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}]
    for n in range(24, 1, -1):  # runs of spaces, as GPT-NeoX's tokenizer adds them
        added.append({"id": len(vocab), "content": " " * n, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": True, "special": False})
        vocab[" " * n] = len(vocab)
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
                 "normalizer": {"type": "NFC"}, "pre_tokenizer": byte_level,
                 "post_processor": byte_level, "decoder": byte_level,
                 "model": {"type": "BPE", "dropout": None, "unk_token": None,
                           "continuing_subword_prefix": None, "end_of_word_suffix": None,
                           "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                           "merges": [f"{a} {b}" for a, b in merges]}}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)


# --- float64 references (model/mixers/mamba2.h and rwkv4.h state the equations) ---

def read_weights(directory):
    if os.path.exists(os.path.join(directory, "pytorch_model.bin")):
        sd = torch.load(os.path.join(directory, "pytorch_model.bin"))
        return {k: v.double().numpy() for k, v in sd.items()}
    files = [f for f in os.listdir(directory) if f.endswith(".safetensors")]
    kinds = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
    out = {}
    for name in files:
        data = open(os.path.join(directory, name), "rb").read()
        length = struct.unpack("<Q", data[:8])[0]
        header = json.loads(data[8:8 + length])
        for key, info in header.items():
            if key == "__metadata__":
                continue
            start, end = info["data_offsets"]
            raw = bytearray(data[8 + length + start:8 + length + end])
            t = torch.frombuffer(raw, dtype=kinds[info["dtype"]]) if raw else torch.empty(0)
            out[key] = t.reshape(info["shape"]).double().numpy()
    return out


def rms_norm(x, w, eps=1e-5):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def layer_norm(x, w, b, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps) * w + b


def silu(x):
    return x / (1 + np.exp(-x))


def mamba2_logits(w, config, tokens):
    ssm_layout = "ssm_cfg" in config
    emb = w["backbone.embedding.weight" if ssm_layout else "backbone.embeddings.weight"]
    if ssm_layout:
        c = config["ssm_cfg"]
        layers, n, groups, p = config["n_layer"], c["d_state"], c["ngroups"], c["headdim"]
    else:
        layers, n, groups, p = (config["num_hidden_layers"], config["state_size"], config["n_groups"],
                                config["head_dim"])
    d = emb.shape[1]
    inner = 2 * d
    heads = inner // p
    channels = inner + 2 * groups * n
    h = emb[tokens]  # [T, d]
    for l in range(layers):
        pre = f"backbone.layers.{l}."
        u = rms_norm(h, w[pre + "norm.weight"])
        proj = u @ w[pre + "mixer.in_proj.weight"].T
        z, xbc, dt = proj[:, :inner], proj[:, inner:inner + channels], proj[:, inner + channels:]
        conv = w[pre + "mixer.conv1d.weight"][:, 0, :]  # [channels, W]
        width = conv.shape[1]
        padded = np.concatenate([np.zeros((width - 1, channels)), xbc])
        xbc = silu(np.stack([(padded[t:t + width] * conv.T).sum(0) for t in range(len(tokens))])
                   + w[pre + "mixer.conv1d.bias"])
        x = xbc[:, :inner].reshape(-1, heads, p)
        bm = xbc[:, inner:inner + groups * n].reshape(-1, groups, n)
        cm = xbc[:, inner + groups * n:].reshape(-1, groups, n)
        dt = np.logaddexp(0, dt + w[pre + "mixer.dt_bias"])
        a = -np.exp(w[pre + "mixer.A_log"])
        s = np.zeros((heads, p, n))
        ys = []
        for t in range(len(tokens)):
            y = np.zeros((heads, p))
            for hd in range(heads):
                g = hd // (heads // groups)
                s[hd] = np.exp(dt[t, hd] * a[hd]) * s[hd] + dt[t, hd] * np.outer(x[t, hd], bm[t, g])
                y[hd] = s[hd] @ cm[t, g] + w[pre + "mixer.D"][hd] * x[t, hd]
            ys.append(y.reshape(-1))
        y = np.stack(ys) * silu(z)
        y = y.reshape(len(tokens), groups, -1)
        y = (y / np.sqrt((y * y).mean(-1, keepdims=True) + 1e-5)).reshape(len(tokens), inner)
        h = h + (y * w[pre + "mixer.norm.weight"]) @ w[pre + "mixer.out_proj.weight"].T
    h = rms_norm(h, w["backbone.norm_f.weight"])
    return h @ emb.T


def rwkv4_logits(w, config, tokens):
    every = config.get("rescale_every", 6) or 0
    h = w["rwkv.embeddings.weight"][tokens]
    steps = len(tokens)
    for l in range(config["num_hidden_layers"]):
        b = f"rwkv.blocks.{l}."
        scale = 2.0 ** -(l // every) if every else 1.0
        if l == 0:
            h = layer_norm(h, w[b + "pre_ln.weight"], w[b + "pre_ln.bias"])
        a = layer_norm(h, w[b + "ln1.weight"], w[b + "ln1.bias"])
        prev = np.concatenate([np.zeros((1, a.shape[1])), a[:-1]])
        at = b + "attention."
        mix = lambda name, cur, old: cur * w[name].reshape(-1) + old * (1 - w[name].reshape(-1))
        k = mix(at + "time_mix_key", a, prev) @ w[at + "key.weight"].T
        v = mix(at + "time_mix_value", a, prev) @ w[at + "value.weight"].T
        r = 1 / (1 + np.exp(-(mix(at + "time_mix_receptance", a, prev) @ w[at + "receptance.weight"].T)))
        decay, first = -np.exp(w[at + "time_decay"]), w[at + "time_first"]
        wkv = np.zeros_like(k)
        for t in range(steps):  # the plain sums over every earlier token
            weights = np.exp((t - 1 - np.arange(t))[:, None] * decay + k[:t])
            now = np.exp(first + k[t])
            wkv[t] = ((weights * v[:t]).sum(0) + now * v[t]) / (weights.sum(0) + now)
        h = h + (r * wkv) @ (w[at + "output.weight"] * scale).T
        x = layer_norm(h, w[b + "ln2.weight"], w[b + "ln2.bias"])
        prev = np.concatenate([np.zeros((1, x.shape[1])), x[:-1]])
        ff = b + "feed_forward."
        key = np.maximum(mix(ff + "time_mix_key", x, prev) @ w[ff + "key.weight"].T, 0) ** 2
        gate = 1 / (1 + np.exp(-(mix(ff + "time_mix_receptance", x, prev) @ w[ff + "receptance.weight"].T)))
        h = h + gate * (key @ (w[ff + "value.weight"] * scale).T)
        if every and (l + 1) % every == 0:
            h = h / 2
    h = layer_norm(h, w["rwkv.ln_out.weight"], w["rwkv.ln_out.bias"])
    return h @ w["head.weight"].T


def reference_logits(directory, tokens):
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    w = read_weights(directory)
    if config.get("model_type") == "rwkv":
        return rwkv4_logits(w, config, tokens)
    if config.get("model_type") == "lfm2":
        return lfm2_tool.logits(w, config, tokens)
    if config.get("model_type") == "granitemoehybrid":
        return granite_tool.logits(w, config, tokens)
    return mamba2_logits(w, config, tokens)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("--family", choices=["mamba2", "mamba2-ssm", "rwkv4", "lfm2", "granite"], required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--format", choices=["safetensors", "sharded", "bin"], default="safetensors")
    w.add_argument("--dtype", default="float32")
    w.add_argument("--seed", type=int, default=1)
    w.add_argument("--d", type=int, default=48)
    w.add_argument("--layers", type=int, default=2)
    w.add_argument("--vocab", type=int, default=544)
    w.add_argument("--shape", choices=sorted(SHAPES) + sorted(lfm2_tool.SHAPES) + sorted(granite_tool.SHAPES), default="")
    w.add_argument("--untied", action="store_true", help="lfm2, granite: an lm_head of its own")
    w.add_argument("--rope", action="store_true", help="granite: rotary positions, not \"nope\"")
    w.add_argument("--experts", type=int, default=0, help="granite: a mixture of this many experts")
    w.add_argument("--tokenizer", default="")
    w.add_argument("--loud_padding", action="store_true")
    t = sub.add_parser("tokenizer")
    t.add_argument("--out", required=True)
    lg = sub.add_parser("logits")
    lg.add_argument("--dir", required=True)
    lg.add_argument("--tokens", required=True)
    args = parser.parse_args()
    if args.command == "write":
        write(args)
    elif args.command == "tokenizer":
        write_tokenizer(args.out)
    else:
        tokens = [int(x) for x in args.tokens.split(",")]
        json.dump(reference_logits(args.dir, tokens).tolist(), sys.stdout)


if __name__ == "__main__":
    main()
