"""fp32 matmul C = A @ B (a_t = A.T given) where a 2-D SPMD grid (M/128, N/512) assigns one output block per program."""
import numpy as np


def get_inputs():
    K, M, N = 256, 256, 1024
    a_t = np.random.randn(K, M).astype(np.float32)
    b = np.random.randn(K, N).astype(np.float32)
    return [a_t, b]


def reference(a_t, b):
    return (a_t.astype(np.float64).T @ b.astype(np.float64)).astype(np.float32)


TOLERANCE = {"atol": 1e-3, "rtol": 1e-4}
GRID = (2, 2)
