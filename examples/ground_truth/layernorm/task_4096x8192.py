"""LayerNorm at the shape the tutorial's published latencies were most likely measured at: the example
script's perf mode defaults (``--nrows 4096 --ncols 8192``) fp32, eps 1e-5, with gamma / beta.

Why this shape and not the tutorial text's "(300, 1000)": the published log lines (">>>> Running version
v1." then NCLatency percentiles) are the ones the script's perf branch prints (its accuracy branch
prints ">>>> Running version 1"), and that branch runs ``nki.benchmark`` at the argument defaults. 2.3 ms
also fits 4096 x 8192 (256 MiB of HBM traffic is ~1 ms at 272 GB/s) and not 300 x 1000 (2.4 MB).
The verification task is ``task.py`` (same arithmetic, small)."""
import numpy as np

EPS = 1e-5
TARGET = "trn1"


def get_inputs():
    x = np.random.rand(4096, 8192).astype(np.float32)
    gamma = np.random.rand(8192).astype(np.float32)
    beta = np.random.rand(8192).astype(np.float32)
    return [x, gamma, beta]


def reference(x, gamma, beta):
    x64 = x.astype(np.float64)
    mu = x64.mean(axis=1, keepdims=True)
    var = x64.var(axis=1, keepdims=True)
    return ((x64 - mu) / np.sqrt(var + EPS) * gamma + beta).astype(np.float32)


TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}
