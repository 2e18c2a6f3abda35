"""LFM2 checkpoints in transformers' public layout (Lfm2ForCausalLM, config.json
model_type "lfm2") with random weights, and a float64 reference of the model
written from transformers' modeling code: RMSNorm, the double-gated short
convolution, grouped-query attention with RMSNorm on each head's queries and
keys and rotary positions, the SwiGLU feed-forward. hf_checkpoints.py calls
it for --family lfm2 and for directories whose model_type is "lfm2".
"""
import collections
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hybrid_reference import causal_attention, rms_norm, rotary, silu  # noqa: E402

SHAPES = {
    # LiquidAI/LFM2-350M and LFM2-1.2B: 16 layers, six of them attention.
    "lfm2-350m": dict(d=1024, layers=16, heads=16, kv_heads=8, ff=6656, vocab=65536),
    "lfm2-1.2b": dict(d=2048, layers=16, heads=32, kv_heads=8, ff=12288, vocab=65536),
}
PUBLIC_ATTENTION = [2, 5, 8, 10, 12, 14]


def ff_width(config):
    """transformers' Lfm2MLP width."""
    width = config.get("block_ff_dim", config["intermediate_size"])
    if config.get("block_auto_adjust_ff_dim", True):
        width = int(2 * width / 3)
        multiplier = config.get("block_ffn_dim_multiplier", 1.0)
        if multiplier is not None:
            width = int(multiplier * width)
            multiple = config.get("block_multiple_of", 256)
            width = multiple * ((width + multiple - 1) // multiple)
    return width


def write(args, size):
    """(state dict, config) of an LFM2 with random weights."""
    shape = SHAPES.get(args.shape)
    if shape:
        size = dict(shape)
        attention = PUBLIC_ATTENTION
    else:
        size = dict(d=size["d"], layers=max(size["layers"], 3), heads=4, kv_heads=2, ff=2 * size["d"],
                    vocab=size["vocab"])
        attention = [l for l in range(size["layers"]) if l % 3 == 1]
    d, layers, heads, kv = size["d"], size["layers"], size["heads"], size["kv_heads"]
    config = {"architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "vocab_size": size["vocab"],
              "hidden_size": d, "intermediate_size": size["ff"], "num_hidden_layers": layers,
              "num_attention_heads": heads, "num_key_value_heads": kv,
              "max_position_embeddings": 128000, "norm_eps": 1e-5, "conv_bias": False,
              "conv_L_cache": 3, "block_multiple_of": 16 if not shape else 256,
              "block_ffn_dim_multiplier": 1.0, "block_auto_adjust_ff_dim": True,
              "layer_types": ["full_attention" if l in attention else "conv" for l in range(layers)],
              "rope_theta": 1000000.0, "tie_word_embeddings": not args.untied,
              "initializer_range": 0.02, "use_cache": True, "bos_token_id": 1, "eos_token_id": 7,
              "pad_token_id": 0, "torch_dtype": "bfloat16", "transformers_version": "4.54.0"}
    head, width, hidden = d // heads, config["conv_L_cache"], ff_width(config)
    g = torch.Generator().manual_seed(args.seed)
    dense = lambda rows, cols: torch.randn(rows, cols, generator=g) / cols ** 0.5
    gain = lambda n: 1.0 + 0.2 * torch.randn(n, generator=g)
    sd = collections.OrderedDict()
    sd["model.embed_tokens.weight"] = torch.randn(size["vocab"], d, generator=g)
    for l in range(layers):
        p = f"model.layers.{l}."
        sd[p + "operator_norm.weight"] = gain(d)
        if l in attention:
            sd[p + "self_attn.q_proj.weight"] = dense(heads * head, d)
            sd[p + "self_attn.k_proj.weight"] = dense(kv * head, d)
            sd[p + "self_attn.v_proj.weight"] = dense(kv * head, d)
            sd[p + "self_attn.out_proj.weight"] = dense(d, heads * head)
            sd[p + "self_attn.q_layernorm.weight"] = gain(head)
            sd[p + "self_attn.k_layernorm.weight"] = gain(head)
        else:
            sd[p + "conv.in_proj.weight"] = dense(3 * d, d)
            sd[p + "conv.conv.weight"] = torch.randn(d, 1, width, generator=g) / width ** 0.5
            sd[p + "conv.out_proj.weight"] = dense(d, d)
        sd[p + "ffn_norm.weight"] = gain(d)
        sd[p + "feed_forward.w1.weight"] = dense(hidden, d)
        sd[p + "feed_forward.w3.weight"] = dense(hidden, d)
        sd[p + "feed_forward.w2.weight"] = dense(d, hidden)
    sd["model.embedding_norm.weight"] = gain(d)
    if args.untied:
        sd["lm_head.weight"] = dense(size["vocab"], d)
    return sd, config


def attention(w, p, x, config):
    steps, d = x.shape
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    head, eps = d // heads, config["norm_eps"]
    q = rms_norm((x @ w[p + "q_proj.weight"].T).reshape(steps, heads, head), w[p + "q_layernorm.weight"], eps)
    k = rms_norm((x @ w[p + "k_proj.weight"].T).reshape(steps, kv, head), w[p + "k_layernorm.weight"], eps)
    v = (x @ w[p + "v_proj.weight"].T).reshape(steps, kv, head)
    q, k = rotary(q, k, config["rope_theta"])
    return causal_attention(q, k, v, 1.0 / np.sqrt(head)) @ w[p + "out_proj.weight"].T


def short_conv(w, p, x):
    steps, d = x.shape
    bcx = x @ w[p + "in_proj.weight"].T
    b, c, u = bcx[:, :d], bcx[:, d:2 * d], bcx[:, 2 * d:]
    kernel = w[p + "conv.weight"][:, 0, :]  # [d, L]
    width = kernel.shape[1]
    padded = np.concatenate([np.zeros((width - 1, d)), b * u])
    z = np.stack([(padded[t:t + width] * kernel.T).sum(0) for t in range(steps)])
    return (c * z) @ w[p + "out_proj.weight"].T


def logits(w, config, tokens):
    eps = config["norm_eps"]
    emb = w["model.embed_tokens.weight"]
    h = emb[tokens]
    for l, kind in enumerate(config["layer_types"]):
        p = f"model.layers.{l}."
        x = rms_norm(h, w[p + "operator_norm.weight"], eps)
        if kind == "full_attention":
            h = h + attention(w, p + "self_attn.", x, config)
        else:
            h = h + short_conv(w, p + "conv.", x)
        x = rms_norm(h, w[p + "ffn_norm.weight"], eps)
        ff = p + "feed_forward."
        h = h + (silu(x @ w[ff + "w1.weight"].T) * (x @ w[ff + "w3.weight"].T)) @ w[ff + "w2.weight"].T
    h = rms_norm(h, w["model.embedding_norm.weight"], eps)
    return h @ w.get("lm_head.weight", emb).T
