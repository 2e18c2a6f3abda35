"""Granite 4.0-H checkpoints in transformers' public layout
(GraniteMoeHybridForCausalLM, config.json model_type "granitemoehybrid") with
random weights, and a float64 reference of the model written from
transformers' modeling code: Mamba-2 layers (the gated RMSNorm over the whole
inner width), grouped-query attention without positions ("nope") or with
rotary ones, the shared SwiGLU MLP after every layer (and, with --experts,
a top-k mixture of SwiGLU experts beside it, as Tiny and Small have), and
Granite's
embedding, residual and attention multipliers and logits scaling.
hf_checkpoints.py calls it for --family granite and for directories whose
model_type is "granitemoehybrid".
"""
import collections
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hybrid_reference import causal_attention, rms_norm, rotary, silu  # noqa: E402

SHAPES = {
    # ibm-granite/granite-4.0-h-350m and granite-4.0-h-1b: Mamba-2 layers with
    # four attention layers among them.
    "granite-4.0-h-350m": dict(d=768, layers=32, heads=12, kv_heads=4, mamba_heads=48, mamba_head=32,
                               state=128, ff=2048, vocab=100352, attention=[10, 13, 17, 27]),
    "granite-4.0-h-1b": dict(d=1536, layers=40, heads=12, kv_heads=4, mamba_heads=48, mamba_head=64,
                             state=128, ff=4096, vocab=100352, attention=[5, 15, 25, 35]),
}


def write(args, size):
    """(state dict, config) of a Granite 4.0-H with random weights."""
    shape = SHAPES.get(args.shape)
    if shape:
        size = dict(shape)
    else:
        layers = max(size["layers"], 4)
        size = dict(d=size["d"], layers=layers, heads=4, kv_heads=2, mamba_heads=6,
                    mamba_head=2 * size["d"] // 6, state=16, ff=2 * size["d"], vocab=size["vocab"],
                    attention=[l for l in range(layers) if l % 3 == 1])
    d, layers, heads, kv = size["d"], size["layers"], size["heads"], size["kv_heads"]
    mh, state, conv = size["mamba_heads"], size["state"], 4
    inner = 2 * d
    expert_width = d // 2 if args.experts else size["ff"]
    config = {"architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid",
              "vocab_size": size["vocab"], "hidden_size": d, "intermediate_size": expert_width,
              "shared_intermediate_size": size["ff"], "num_hidden_layers": layers,
              "num_attention_heads": heads, "num_key_value_heads": kv, "hidden_act": "silu",
              "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "initializer_range": 0.1,
              "use_cache": True, "bos_token_id": 100257, "eos_token_id": 100257, "pad_token_id": 100256,
              "tie_word_embeddings": not args.untied, "rope_theta": 10000,
              "rope_scaling": None, "attention_bias": False, "attention_dropout": 0.0,
              "embedding_multiplier": 12, "logits_scaling": 3, "residual_multiplier": 0.246,
              "attention_multiplier": 0.015625, "num_local_experts": args.experts,
              "num_experts_per_tok": 2 if args.experts else 0,
              "output_router_logits": False, "router_aux_loss_coef": 0.01,
              "position_embedding_type": "rope" if args.rope else "nope",
              "layer_types": ["attention" if l in size["attention"] else "mamba" for l in range(layers)],
              "mamba_n_heads": mh, "mamba_n_groups": 1, "mamba_d_state": state,
              "mamba_d_head": inner // mh, "mamba_d_conv": conv, "mamba_expand": 2,
              "mamba_chunk_size": 256, "mamba_conv_bias": True, "mamba_proj_bias": False,
              "torch_dtype": "bfloat16", "transformers_version": "4.56.0"}
    head = d // heads
    channels = inner + 2 * state
    g = torch.Generator().manual_seed(args.seed)
    dense = lambda rows, cols: torch.randn(rows, cols, generator=g) / cols ** 0.5
    gain = lambda n: 1.0 + 0.2 * torch.randn(n, generator=g)
    sd = collections.OrderedDict()
    sd["model.embed_tokens.weight"] = torch.randn(size["vocab"], d, generator=g) * 0.1
    for l in range(layers):
        p = f"model.layers.{l}."
        sd[p + "input_layernorm.weight"] = gain(d)
        if l in size["attention"]:
            # Scores of unit-variance queries and keys times attention_multiplier
            # would be flat; keys scaled up so that softmax weighs positions.
            sd[p + "self_attn.q_proj.weight"] = dense(heads * head, d)
            sd[p + "self_attn.k_proj.weight"] = dense(kv * head, d) * 8
            sd[p + "self_attn.v_proj.weight"] = dense(kv * head, d)
            sd[p + "self_attn.o_proj.weight"] = dense(d, heads * head)
        else:
            m = p + "mamba."
            sd[m + "in_proj.weight"] = dense(inner + channels + mh, d)
            sd[m + "conv1d.weight"] = torch.randn(channels, 1, conv, generator=g) * 0.5
            sd[m + "conv1d.bias"] = torch.randn(channels, generator=g) * 0.1
            sd[m + "dt_bias"] = torch.randn(mh, generator=g) - 2.0
            sd[m + "A_log"] = torch.log(1 + 15 * torch.rand(mh, generator=g))
            sd[m + "D"] = 1 + 0.3 * torch.randn(mh, generator=g)
            sd[m + "norm.weight"] = gain(inner)
            sd[m + "out_proj.weight"] = dense(d, inner)
        sd[p + "post_attention_layernorm.weight"] = gain(d)
        sd[p + "shared_mlp.input_linear.weight"] = dense(2 * size["ff"], d)
        sd[p + "shared_mlp.output_linear.weight"] = dense(d, size["ff"])
        if args.experts:
            e, width = args.experts, expert_width
            moe = p + "block_sparse_moe."
            sd[moe + "input_linear.weight"] = torch.randn(e, 2 * width, d, generator=g) / d ** 0.5
            sd[moe + "output_linear.weight"] = torch.randn(e, d, width, generator=g) / width ** 0.5
            sd[moe + "router.layer.weight"] = dense(e, d) * 3
    sd["model.norm.weight"] = gain(d)
    if args.untied:
        sd["lm_head.weight"] = dense(size["vocab"], d)
    return sd, config


def attention(w, p, x, config):
    steps, d = x.shape
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    head = d // heads
    q = (x @ w[p + "q_proj.weight"].T).reshape(steps, heads, head)
    k = (x @ w[p + "k_proj.weight"].T).reshape(steps, kv, head)
    v = (x @ w[p + "v_proj.weight"].T).reshape(steps, kv, head)
    if config.get("position_embedding_type") == "rope":
        q, k = rotary(q, k, config["rope_theta"])
    out = causal_attention(q, k, v, config["attention_multiplier"])
    return out @ w[p + "o_proj.weight"].T


def mamba(w, p, x, config):
    steps, d = x.shape
    heads, n, inner = config["mamba_n_heads"], config["mamba_d_state"], config["mamba_expand"] * d
    hp = inner // heads
    channels = inner + 2 * n
    proj = x @ w[p + "in_proj.weight"].T
    z, xbc, dt = proj[:, :inner], proj[:, inner:inner + channels], proj[:, inner + channels:]
    kernel = w[p + "conv1d.weight"][:, 0, :]
    width = kernel.shape[1]
    padded = np.concatenate([np.zeros((width - 1, channels)), xbc])
    xbc = silu(np.stack([(padded[t:t + width] * kernel.T).sum(0) for t in range(steps)])
               + w[p + "conv1d.bias"])
    xs, bm, cm = xbc[:, :inner].reshape(steps, heads, hp), xbc[:, inner:inner + n], xbc[:, inner + n:]
    dt = np.logaddexp(0, dt + w[p + "dt_bias"])
    a = -np.exp(w[p + "A_log"])
    s = np.zeros((heads, hp, n))
    ys = []
    for t in range(steps):
        s = np.exp(dt[t] * a)[:, None, None] * s + dt[t][:, None, None] * xs[t][:, :, None] * bm[t]
        ys.append((s @ cm[t] + w[p + "D"][:, None] * xs[t]).reshape(-1))
    y = np.stack(ys) * silu(z)
    y = y / np.sqrt((y * y).mean(-1, keepdims=True) + config["rms_norm_eps"]) * w[p + "norm.weight"]
    return y @ w[p + "out_proj.weight"].T


def experts(w, p, x, top_k):
    """Each row's top_k experts by router logit, weighted by the softmax of those logits."""
    logits = x @ w[p + "router.layer.weight"].T
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        chosen = np.argsort(-logits[t], kind="stable")[:top_k]
        gates = np.exp(logits[t, chosen] - logits[t, chosen].max())
        gates /= gates.sum()
        for e, gate in zip(chosen, gates):
            gate_up = w[p + "input_linear.weight"][e] @ x[t]
            g, u = np.split(gate_up, 2)
            out[t] += gate * (w[p + "output_linear.weight"][e] @ (silu(g) * u))
    return out


def logits(w, config, tokens):
    eps, residual = config["rms_norm_eps"], config["residual_multiplier"]
    emb = w["model.embed_tokens.weight"]
    h = emb[tokens] * config["embedding_multiplier"]
    for l, kind in enumerate(config["layer_types"]):
        p = f"model.layers.{l}."
        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        if kind == "attention":
            h = h + attention(w, p + "self_attn.", x, config) * residual
        else:
            h = h + mamba(w, p + "mamba.", x, config) * residual
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = np.split(x @ w[p + "shared_mlp.input_linear.weight"].T, 2, -1)
        out = (silu(gate) * up) @ w[p + "shared_mlp.output_linear.weight"].T
        if config.get("num_local_experts"):
            out = out + experts(w, p + "block_sparse_moe.", x, config["num_experts_per_tok"])
        h = h + out * residual
    h = rms_norm(h, w["model.norm.weight"], eps)
    return h @ w.get("lm_head.weight", emb).T / config["logits_scaling"]
