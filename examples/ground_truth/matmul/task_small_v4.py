"""Small matmul for v4 with the tutorial's block sizes (16 x 128 rows of M, 2 x 512 columns of N,
8 x 128 of K per block): lhsT [2048, 4096] (K x M) and rhs [2048, 1024] bf16 -> 2 M blocks, 1 N
block, 2 K blocks, so the sequential K-block loop carries the SBUF-resident partial sums once.
(N = 2048, two N blocks, also verifies; it doubles the simulation time.)"""
import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16
K, M, N = 2048, 4096, 1024
TARGET = "trn1"


def get_inputs():
    rng = np.random.default_rng(np.random.randint(2**31))
    scale = np.float32(K ** -0.25)
    lhsT = (rng.standard_normal((K, M), dtype=np.float32) * scale).astype(BF16)
    rhs = (rng.standard_normal((K, N), dtype=np.float32) * scale).astype(BF16)
    return [lhsT, rhs]


def reference(lhsT, rhs):
    return (lhsT.astype(np.float32).T @ rhs.astype(np.float32)).astype(BF16)


# partial sums are kept in bf16 between K blocks (as in the tutorial): allow a few bf16 ulps
TOLERANCE = {"atol": 5e-2, "rtol": 3e-2}
