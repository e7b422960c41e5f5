"""Tiled fp32 matmul C = A @ B with A given pre-transposed (a_t = A.T, shape K x M), K accumulated in PSUM."""
import numpy as np


def get_inputs():
    K, M, N = 1024, 512, 1024
    a_t = np.random.randn(K, M).astype(np.float32)
    b = np.random.randn(K, N).astype(np.float32)
    return [a_t, b]


def reference(a_t, b):
    return (a_t.astype(np.float64).T @ b.astype(np.float64)).astype(np.float32)


TOLERANCE = {"atol": 1e-3, "rtol": 1e-4}
