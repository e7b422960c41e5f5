"""Element-wise addition of two fp32 matrices whose row count is not a multiple of 128."""
import numpy as np


def get_inputs():
    # 2112 rows = 16 full 128-row tiles plus a ragged 64-row tile
    a = np.random.randn(2112, 1024).astype(np.float32)
    b = np.random.randn(2112, 1024).astype(np.float32)
    return [a, b]


def reference(a, b):
    return a + b


TOLERANCE = {"atol": 1e-6, "rtol": 1e-6}
