"""Sum over the free (last) axis of a 2-D fp32 matrix, keeping a trailing size-1 dim."""
import numpy as np


def get_inputs():
    x = np.random.randn(2048, 1024).astype(np.float32)
    return [x]


def reference(x):
    return x.sum(axis=1, keepdims=True, dtype=np.float64).astype(np.float32)


TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}
