"""Feed-forward block y = silu(x @ W1) @ W2 on a 3-D input x (batch=2, seq=128, d=256), hidden 512."""
import numpy as np


def get_inputs():
    B, S, D, F = 4, 128, 512, 1024
    x = np.random.randn(B, S, D).astype(np.float32)
    w1 = (np.random.randn(D, F) / np.sqrt(D)).astype(np.float32)
    w2 = (np.random.randn(F, D) / np.sqrt(F)).astype(np.float32)
    return [x, w1, w2]


def reference(x, w1, w2):
    h = x.astype(np.float64) @ w1.astype(np.float64)
    h = h / (1.0 + np.exp(-h))
    return (h @ w2.astype(np.float64)).astype(np.float32)


TOLERANCE = {"atol": 1e-4, "rtol": 1e-3}
