"""The matmul tutorial's benchmark shape: lhsT [8192, 4096] (K x M) and rhs [8192, 8192] bf16 -> [4096, 8192] bf16.

For tracing (the cost model); inputs are generated cheaply, the reference is a plain fp32 matmul.
"""
import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16
K, M, N = 8192, 4096, 8192
TARGET = "trn1"


def get_inputs():
    rng = np.random.default_rng(np.random.randint(2**31))
    scale = np.float32(K ** -0.25)  # keeps the dot products around unit size
    lhsT = (rng.standard_normal((K, M), dtype=np.float32) * scale).astype(BF16)
    rhs = (rng.standard_normal((K, N), dtype=np.float32) * scale).astype(BF16)
    return [lhsT, rhs]


def reference(lhsT, rhs):
    return (lhsT.astype(np.float32).T @ rhs.astype(np.float32)).astype(BF16)


TOLERANCE = {"atol": 5e-2, "rtol": 3e-2}
