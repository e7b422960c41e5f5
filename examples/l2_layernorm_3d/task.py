"""LayerNorm over the hidden axis of a 3-D (batch, seq, hidden) tensor with affine gamma/beta."""
import numpy as np

EPS = 1e-5


def get_inputs():
    x = (np.random.randn(4, 512, 512) * 2.0 + 0.5).astype(np.float32)
    gamma = (1.0 + 0.1 * np.random.randn(512)).astype(np.float32)
    beta = (0.1 * np.random.randn(512)).astype(np.float32)
    return [x, gamma, beta]


def reference(x, gamma, beta):
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (x64 - mean) / np.sqrt(var + EPS) * gamma + beta
    return y.astype(np.float32)


TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}
