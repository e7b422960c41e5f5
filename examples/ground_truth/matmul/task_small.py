"""Small matmul for verification of v1..v3: lhsT [1024, 512] and rhs [1024, 2048] bf16 (K=1024, M=512, N=2048)."""
import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16
K, M, N = 1024, 512, 2048
TARGET = "trn1"


def get_inputs():
    scale = K ** -0.25
    lhsT = (np.random.randn(K, M) * scale).astype(BF16)
    rhs = (np.random.randn(K, N) * scale).astype(BF16)
    return [lhsT, rhs]


def reference(lhsT, rhs):
    return (lhsT.astype(np.float64).T @ rhs.astype(np.float64)).astype(BF16)


# bf16 output (8-bit mantissa) of unit-size values
TOLERANCE = {"atol": 3e-2, "rtol": 2e-2}
