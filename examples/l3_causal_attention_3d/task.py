"""Causal multi-head attention on 3-D inputs q, k, v of shape (heads=2, seq=256, d=64): softmax(mask(QK^T/sqrt(d)))V per head."""
import numpy as np


def get_inputs():
    H, S, D = 4, 512, 128
    q = np.random.randn(H, S, D).astype(np.float32)
    k = np.random.randn(H, S, D).astype(np.float32)
    v = np.random.randn(H, S, D).astype(np.float32)
    return [q, k, v]


def reference(q, k, v):
    q64, k64, v64 = (t.astype(np.float64) for t in (q, k, v))
    S, D = q.shape[1], q.shape[2]
    s = np.einsum("hqd,hkd->hqk", q64, k64) / np.sqrt(D)
    causal = np.tril(np.ones((S, S), dtype=bool))
    s = np.where(causal[None], s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("hqk,hkd->hqd", p, v64).astype(np.float32)


TOLERANCE = {"atol": 1e-4, "rtol": 1e-3}
