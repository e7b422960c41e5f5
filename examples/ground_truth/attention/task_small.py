"""SD self-attention out = softmax(0.125 * q.T k.T) v per batch, bs2 seq512 d128 (verification) bf16.
q (bs, d, seq), k and v (bs, seq, d) -> (bs, seq, d); one SPMD instance per batch element."""
import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16
BS, SEQ, D = 2, 512, 128
GRID = (BS,)
TARGET = "trn1"


def get_inputs():
    rng = np.random.default_rng(np.random.randint(2**31))
    # uniform [0, 1) as in the sample's tests
    q = rng.random((BS, D, SEQ), dtype=np.float32).astype(BF16)
    k = rng.random((BS, SEQ, D), dtype=np.float32).astype(BF16)
    v = rng.random((BS, SEQ, D), dtype=np.float32).astype(BF16)
    return [q, k, v]


def reference(q, k, v):
    out = np.empty((BS, SEQ, D), dtype=np.float32)
    for b in range(BS):
        s = (0.125 * q[b].astype(np.float32)).T @ k[b].astype(np.float32).T   # (seq, seq)
        s -= s.max(axis=1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=1, keepdims=True)
        out[b] = p @ v[b].astype(np.float32)
    return out.astype(BF16)


TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
