"""RMSNorm over the hidden axis: y = x / sqrt(mean(x^2) + eps) * w, x (2048, 1024), w (512,)."""
import numpy as np

EPS = 1e-6


def get_inputs():
    x = np.random.randn(2048, 1024).astype(np.float32)
    w = (1.0 + 0.1 * np.random.randn(1024)).astype(np.float32)
    return [x, w]


def reference(x, w):
    x64 = x.astype(np.float64)
    rms = np.sqrt(np.mean(x64 * x64, axis=1, keepdims=True) + EPS)
    return (x64 / rms * w.astype(np.float64)[None, :]).astype(np.float32)


TOLERANCE = {"atol": 1e-5, "rtol": 1e-4}
