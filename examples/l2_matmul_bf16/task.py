"""bf16 matmul C = A @ B with A in natural (M, K) layout: on-chip TensorE transposes, fp32 PSUM, bf16 output."""
import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16


def get_inputs():
    M, K, N = 512, 512, 1024
    a = np.random.randn(M, K).astype(BF16)
    b = np.random.randn(K, N).astype(BF16)
    return [a, b]


def reference(a, b):
    c = a.astype(np.float32) @ b.astype(np.float32)
    return c.astype(BF16)


# output is rounded to bf16 (8-bit mantissa): allow about two bf16 ulps
TOLERANCE = {"atol": 5e-2, "rtol": 2e-2}
