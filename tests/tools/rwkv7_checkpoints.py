"""RWKV-7 checkpoints in the public layouts, with random weights, and a float64
reference of the model written from the RWKV-7 paper's equations.

    rwkv7_checkpoints.py write --layout blinkdl|hf|hf-sharded --out PATH
        [--d 64 --layers 2 --head 16 --ffn 128 --vocab 300 --ranks 16,16,8,24
         --dtype float32|float16|bfloat16 --seed 1 --version 7 --also-bin]
    rwkv7_checkpoints.py vocab --out FILE [--size N]  a synthetic RWKV World vocabulary
    rwkv7_checkpoints.py state --out FILE [--layers 2 --d 64 --head 16 --seed 2]
                                                  an initial state (state tuning's .pth)
    rwkv7_checkpoints.py logits --pth FILE --tokens 1,2,3 [--group-norm-eps E]
                                                  float64 logits (JSON)
    rwkv7_checkpoints.py tokenize --vocab FILE --text-file F  greedy longest match (JSON)

The writers follow the tensor names and shapes of BlinkDL's RWKV-LM (.pth,
torch.save) and of flash-linear-attention's Hugging Face layout
(config.json and safetensors, whose format is written here byte by byte:
an 8-byte header length, a JSON header, the data). The reference reads only
the BlinkDL names; `--version 6` writes RWKV-6 names, which importers must
refuse.
"""
import argparse
import collections
import json
import math
import os
import struct
import sys

import numpy as np
import torch

BLOCK_NAMES = ["x_r", "x_w", "x_k", "x_v", "x_a", "x_g"]


def blinkdl_state_dict(d, layers, head, ffn, vocab, ranks, seed, version=7):
    """BlinkDL's names and shapes; random values at sensible scales."""
    g = torch.Generator().manual_seed(seed)
    rand = lambda *shape, scale=1.0: torch.randn(*shape, generator=g) * scale
    uni = lambda *shape: torch.rand(*shape, generator=g)
    heads = d // head
    dw, da, dv, dg = ranks
    sd = collections.OrderedDict()
    sd["emb.weight"] = rand(vocab, d)
    for l in range(layers):
        b = f"blocks.{l}."
        if l == 0:
            sd[b + "ln0.weight"] = 1 + rand(d, scale=0.1)
            sd[b + "ln0.bias"] = rand(d, scale=0.1)
        for n in ("ln1", "ln2"):
            sd[b + n + ".weight"] = 1 + rand(d, scale=0.1)
            sd[b + n + ".bias"] = rand(d, scale=0.1)
        a = b + "att."
        if version == 6:
            sd[a + "time_maa_x"] = uni(1, 1, d)
            sd[a + "time_faaaa"] = rand(heads, head)
            continue
        for n in BLOCK_NAMES:
            sd[a + n] = uni(1, 1, d)
        sd[a + "w0"] = rand(1, 1, d)
        sd[a + "w1"] = rand(d, dw, scale=d ** -0.5)
        sd[a + "w2"] = rand(dw, d, scale=dw ** -0.5)
        sd[a + "a0"] = rand(1, 1, d)
        sd[a + "a1"] = rand(d, da, scale=d ** -0.5)
        sd[a + "a2"] = rand(da, d, scale=da ** -0.5)
        sd[a + "v0"] = rand(1, 1, d)
        sd[a + "v1"] = rand(d, dv, scale=d ** -0.5)
        sd[a + "v2"] = rand(dv, d, scale=dv ** -0.5)
        sd[a + "g1"] = rand(d, dg, scale=d ** -0.5)
        sd[a + "g2"] = rand(dg, d, scale=dg ** -0.5)
        sd[a + "k_k"] = 0.7 + rand(1, 1, d, scale=0.1)
        sd[a + "k_a"] = 1 + rand(1, 1, d, scale=0.1)
        sd[a + "r_k"] = rand(heads, head, scale=0.3)
        for n in ("receptance", "key", "value", "output"):
            sd[a + n + ".weight"] = rand(d, d, scale=d ** -0.5)
        sd[a + "ln_x.weight"] = 1 + rand(d, scale=0.1)
        sd[a + "ln_x.bias"] = rand(d, scale=0.1)
        f = b + "ffn."
        sd[f + "x_k"] = uni(1, 1, d)
        sd[f + "key.weight"] = rand(ffn, d, scale=d ** -0.5)
        sd[f + "value.weight"] = rand(d, ffn, scale=ffn ** -0.5)
    sd["ln_out.weight"] = 1 + rand(d, scale=0.1)
    sd["ln_out.bias"] = rand(d, scale=0.1)
    sd["head.weight"] = rand(vocab, d, scale=d ** -0.5 * 4)
    return sd


def to_hf(sd, layers):
    """The same weights under flash-linear-attention's names."""
    hf = collections.OrderedDict()
    hf["model.embeddings.weight"] = sd["emb.weight"]
    for l in range(layers):
        b, h = f"blocks.{l}.", f"model.layers.{l}."
        a, t = b + "att.", h + "attn."
        if l == 0:
            hf[h + "pre_norm.weight"] = sd[b + "ln0.weight"]
            hf[h + "pre_norm.bias"] = sd[b + "ln0.bias"]
        for ours, theirs in (("ln1", "attn_norm"), ("ln2", "ffn_norm")):
            hf[h + theirs + ".weight"] = sd[b + ours + ".weight"]
            hf[h + theirs + ".bias"] = sd[b + ours + ".bias"]
        for n in BLOCK_NAMES:
            hf[t + n] = sd[a + n]
        for letter in ("w", "a", "v", "g"):
            if letter == "v" and l == 0:
                continue
            hf[t + f"{letter}_lora.lora.0.weight"] = sd[a + letter + "1"].t().contiguous()
            hf[t + f"{letter}_lora.lora.2.weight"] = sd[a + letter + "2"].t().contiguous()
            if letter != "g":
                hf[t + f"{letter}_lora.lora.2.bias"] = sd[a + letter + "0"].reshape(-1)
        hf[t + "k_k"] = sd[a + "k_k"].reshape(-1)
        hf[t + "k_a"] = sd[a + "k_a"].reshape(-1)
        hf[t + "r_k"] = sd[a + "r_k"]
        for ours, theirs in (("receptance", "r_proj"), ("key", "k_proj"), ("value", "v_proj"),
                             ("output", "o_proj")):
            hf[t + theirs + ".weight"] = sd[a + ours + ".weight"]
        hf[t + "g_norm.weight"] = sd[a + "ln_x.weight"]
        hf[t + "g_norm.bias"] = sd[a + "ln_x.bias"]
        hf[h + "ffn.x_k"] = sd[b + "ffn.x_k"].reshape(-1)
        hf[h + "ffn.key.weight"] = sd[b + "ffn.key.weight"]
        hf[h + "ffn.value.weight"] = sd[b + "ffn.value.weight"]
    hf["model.norm.weight"] = sd["ln_out.weight"]
    hf["model.norm.bias"] = sd["ln_out.bias"]
    hf["lm_head.weight"] = sd["head.weight"]
    return hf


SAFE_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}


def write_safetensors(path, tensors):
    header, chunks, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": SAFE_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


def write(args):
    ranks = [int(x) for x in args.ranks.split(",")]
    dtype = getattr(torch, args.dtype)
    sd = blinkdl_state_dict(args.d, args.layers, args.head, args.ffn, args.vocab, ranks, args.seed,
                            args.version)
    sd = collections.OrderedDict((k, v.to(dtype)) for k, v in sd.items())
    if args.layout == "blinkdl":
        torch.save(sd, args.out)
        return
    os.makedirs(args.out, exist_ok=True)
    hf = to_hf(sd, args.layers)
    config = {"model_type": "rwkv7", "hidden_size": args.d, "num_hidden_layers": args.layers,
              "head_dim": args.head, "intermediate_size": args.ffn, "vocab_size": args.vocab,
              "norm_eps": 1e-5, "tie_word_embeddings": False, "norm_first": True,
              "decay_low_rank_dim": ranks[0], "a_low_rank_dim": ranks[1],
              "v_low_rank_dim": ranks[2], "gate_low_rank_dim": ranks[3], "attn": None,
              "hidden_act": "sqrelu", "fuse_norm": False, "value_dim": [args.d] * args.layers}
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f)
    if args.layout == "hf":
        write_safetensors(os.path.join(args.out, "model.safetensors"), hf)
        if args.also_bin:  # the same weights as torch.save writes them, for tools that read that
            config["architectures"] = ["RWKV7ForCausalLM"]
            with open(os.path.join(args.out, "config.json"), "w") as f:
                json.dump(config, f)
            torch.save(hf, os.path.join(args.out, "pytorch_model.bin"))
        return
    names = list(hf)
    halves = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    weight_map = {}
    for file, part in halves.items():
        write_safetensors(os.path.join(args.out, file), collections.OrderedDict((n, hf[n]) for n in part))
        weight_map.update({n: file for n in part})
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


# --- the float64 reference, from the equations (model/mixers/rwkv7.h states them) ---

def layer_norm(x, w, b, eps=1e-5):
    return (x - x.mean()) / np.sqrt(x.var() + eps) * w + b


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def reference_logits(sd, tokens, group_norm_eps=64e-5, time_state=None):
    p = {k: v.double().numpy() for k, v in sd.items()}
    d = p["emb.weight"].shape[1]
    layers = 1 + max(int(k.split(".")[1]) for k in p if k.startswith("blocks."))
    heads, n = p["blocks.0.att.r_k"].shape
    state = [{"a": np.zeros(d), "b": np.zeros(d), "S": np.zeros((heads, n, n))} for _ in range(layers)]
    if time_state is not None:  # state tuning's [H, N, N], transposed into the RNN's state
        for l in range(layers):
            state[l]["S"] = time_state[f"blocks.{l}.att.time_state"].double().numpy().transpose(0, 2, 1).copy()
    out = []
    for token in tokens:
        x = p["emb.weight"][token]
        v_first = None
        for l in range(layers):
            g = lambda name: p[f"blocks.{l}.{name}"]
            if l == 0:
                x = layer_norm(x, g("ln0.weight"), g("ln0.bias"))
            a = layer_norm(x, g("ln1.weight"), g("ln1.bias"))
            prev = state[l]["a"]
            mix = lambda name: a + (prev - a) * g("att." + name).reshape(-1)
            xr, xw, xk, xv, xa, xg = (mix(name) for name in BLOCK_NAMES)
            state[l]["a"] = a
            r = g("att.receptance.weight") @ xr
            k = g("att.key.weight") @ xk
            v = g("att.value.weight") @ xv
            w = np.exp(-math.exp(-0.5) * sigmoid(g("att.w0").reshape(-1) + np.tanh(xw @ g("att.w1")) @ g("att.w2")))
            if l == 0:
                v_first = v
            else:
                v = v + (v_first - v) * sigmoid(g("att.v0").reshape(-1) + xv @ g("att.v1") @ g("att.v2"))
            iclr = sigmoid(g("att.a0").reshape(-1) + xa @ g("att.a1") @ g("att.a2"))
            gate = sigmoid(xg @ g("att.g1")) @ g("att.g2")
            kk = (k * g("att.k_k").reshape(-1)).reshape(heads, n)
            kk = (kk / np.maximum(np.linalg.norm(kk, axis=1, keepdims=True), 1e-12)).reshape(-1)
            k = k * (1 + (iclr - 1) * g("att.k_a").reshape(-1))
            o = np.zeros(d)
            for h in range(heads):
                s = slice(h * n, (h + 1) * n)
                S = state[l]["S"][h]
                transition = np.diag(w[s]) - np.outer(kk[s], iclr[s] * kk[s])
                S = S @ transition + np.outer(v[s], k[s])
                state[l]["S"][h] = S
                y = S @ r[s]
                y = (y - y.mean()) / np.sqrt(y.var() + group_norm_eps) * g("att.ln_x.weight")[s] + g("att.ln_x.bias")[s]
                o[s] = y + (r[s] * k[s] * g("att.r_k")[h]).sum() * v[s]
            x = x + g("att.output.weight") @ (o * gate)
            b = layer_norm(x, g("ln2.weight"), g("ln2.bias"))
            kf = b + (state[l]["b"] - b) * g("ffn.x_k").reshape(-1)
            state[l]["b"] = b
            x = x + g("ffn.value.weight") @ np.maximum(g("ffn.key.weight") @ kf, 0) ** 2
        out.append(p["head.weight"] @ layer_norm(x, p["ln_out.weight"], p["ln_out.bias"]))
    return np.stack(out)


# --- vocabularies ---

def synthetic_vocabulary(size=0):
    """(id, bytes) pairs: every byte, then words, escapes, UTF-8 pieces; then,
    up to `size` entries, filler words (" t1a2"), so that a model of that
    vocabulary size samples no id the file leaves out (llama.cpp names those
    [PADn], and its server cannot parse such output back)."""
    tokens = [bytes([b]) for b in range(256)]
    words = ["the", " the", " river", "river", " keeps", "keep", " state", "\n\n", "User", ":",
             " small", "it's", "\\n", '"q"', "tab\there", "日本", "本語", "語", "\u00e9t\u00e9",
             "Assistant", "🙂", " 🙂🙂"]
    tokens += [w.encode() for w in words]
    tokens += ["日本".encode()[:4], "語".encode()[1:], b"\xe2\x96", b"\x81 "]  # split characters
    seen, unique = set(), []
    for t in tokens:
        if t not in seen:
            seen.add(t)
            unique.append(t)
    unique += [f" t{i:x}".encode() for i in range(len(unique), size)]
    return list(enumerate(unique, start=1))


def literal(token):
    """A Python literal for the token: a str when it is UTF-8, else bytes."""
    try:
        text = token.decode("utf-8")
        return repr(text)
    except UnicodeDecodeError:
        return repr(token)


def write_vocabulary(path, size=0):
    with open(path, "w", encoding="utf-8") as f:
        for i, token in synthetic_vocabulary(size):
            f.write(f"{i} {literal(token)} {len(token)}\n")


def greedy_tokenize(vocab_path, text):
    """Greedy longest match over bytes, the straightforward way."""
    table = {}
    for line in open(vocab_path, encoding="utf-8"):
        if not line.strip():
            continue
        i = int(line[: line.index(" ")])
        value = eval(line[line.index(" "): line.rindex(" ")])  # the vocabulary is Python literals
        table[value.encode("utf-8") if isinstance(value, str) else value] = i
    longest = max(len(t) for t in table)
    data, ids, at = text.encode("utf-8"), [], 0
    while at < len(data):
        for length in range(min(longest, len(data) - at), 0, -1):
            if data[at: at + length] in table:
                ids.append(table[data[at: at + length]])
                at += length
                break
    return ids


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("--layout", choices=["blinkdl", "hf", "hf-sharded"], required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--d", type=int, default=64)
    w.add_argument("--layers", type=int, default=2)
    w.add_argument("--head", type=int, default=16)
    w.add_argument("--ffn", type=int, default=128)
    w.add_argument("--vocab", type=int, default=300)
    w.add_argument("--ranks", default="16,16,8,24")
    w.add_argument("--dtype", default="float32")
    w.add_argument("--seed", type=int, default=1)
    w.add_argument("--version", type=int, default=7)
    w.add_argument("--also-bin", action="store_true",
                   help="hf: also write pytorch_model.bin and config.json's architectures")
    v = sub.add_parser("vocab")
    v.add_argument("--out", required=True)
    v.add_argument("--size", type=int, default=0,
                   help="fill with words up to this many entries (the model's vocabulary less one)")
    st = sub.add_parser("state")
    st.add_argument("--out", required=True)
    st.add_argument("--layers", type=int, default=2)
    st.add_argument("--d", type=int, default=64)
    st.add_argument("--head", type=int, default=16)
    st.add_argument("--seed", type=int, default=2)
    lg = sub.add_parser("logits")
    lg.add_argument("--pth", required=True)
    lg.add_argument("--tokens", required=True)
    lg.add_argument("--group-norm-eps", type=float, default=64e-5)
    tk = sub.add_parser("tokenize")
    tk.add_argument("--vocab", required=True)
    tk.add_argument("--text-file", required=True)
    args = parser.parse_args()
    if args.command == "write":
        write(args)
    elif args.command == "vocab":
        write_vocabulary(args.out, args.size)
    elif args.command == "state":
        g = torch.Generator().manual_seed(args.seed)
        heads = args.d // args.head
        torch.save({f"blocks.{l}.att.time_state": torch.randn(heads, args.head, args.head, generator=g)
                    for l in range(args.layers)}, args.out)
    elif args.command == "logits":
        sd = torch.load(args.pth)
        tokens = [int(t) for t in args.tokens.split(",")]
        print(json.dumps(reference_logits(sd, tokens, args.group_norm_eps).tolist()))
    else:
        text = open(args.text_file, encoding="utf-8").read()
        print(json.dumps(greedy_tokenize(args.vocab, text)))


if __name__ == "__main__":
    sys.exit(main())
