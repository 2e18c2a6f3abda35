"""Float64 pieces the hybrid checkpoint tools' references share
(lfm2_checkpoints.py, granite_checkpoints.py), written from the equations:
RMSNorm, SiLU, rotary positions (the rotate-half form transformers uses) and
causal grouped-query attention.
"""
import numpy as np


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def rotary(q, k, theta):
    """q [T, H, D] and k [T, KV, D] rotated by position (0 to T-1)."""
    steps, head = q.shape[0], q.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, head, 2) / head)
    angles = np.arange(steps)[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(angles)] * 2, -1)[:, None, :]
    sin = np.concatenate([np.sin(angles)] * 2, -1)[:, None, :]
    rotate = lambda a: np.concatenate([-a[..., head // 2:], a[..., :head // 2]], -1)
    return q * cos + rotate(q) * sin, k * cos + rotate(k) * sin


def causal_attention(q, k, v, scale):
    """Each of q's H heads [T, H, D] attends to key/value group h // (H / KV)
    of k and v [T, KV, D] over positions up to its own: [T, H * D]."""
    steps, heads, head = q.shape
    kv = k.shape[1]
    out = np.zeros((steps, heads, head))
    for h in range(heads):
        g = h // (heads // kv)
        scores = q[:, h] @ k[:, g].T * scale
        scores[np.triu_indices(steps, 1)] = -np.inf
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        out[:, h] = (weights / weights.sum(-1, keepdims=True)) @ v[:, g]
    return out.reshape(steps, heads * head)
