"""LayerNorm at the shape the tutorial's published latencies were most likely measured at: the example
script's perf mode defaults (``--nrows 4096 --ncols 8192``) fp32, eps 1e-5, with gamma / beta.

Why this shape and not the tutorial text's "(300, 1000)": the published log lines (">>>> Running version
v1." then NCLatency percentiles) are the ones the script's perf branch prints (its accuracy branch
prints ">>>> Running version 1"), and that branch runs ``nki.benchmark`` at the argument defaults. 2.3 ms
also fits 4096 x 8192 (256 MiB of HBM traffic is ~1 ms at 272 GB/s) and not 300 x 1000 (2.4 MB).
The verification task is ``task.py`` (same arithmetic, small)."""
from layernorm_reference import TOLERANCE, layernorm, make_inputs  # noqa: F401

TARGET = "trn1"


def get_inputs():
    return make_inputs(4096, 8192)


def reference(x, gamma, beta):
    return layernorm(x, gamma, beta)
