"""LayerNorm over the last axis at the tutorial text's shape (300, 1000) fp32, eps 1e-5, with gamma /
beta: the verification task (ragged last row tile). The published latencies are traced at
``task_4096x8192.py``, the shape they were measured at (see there)."""
from layernorm_reference import TOLERANCE, layernorm, make_inputs  # noqa: F401

TARGET = "trn1"


def get_inputs():
    return make_inputs(300, 1000)


def reference(x, gamma, beta):
    return layernorm(x, gamma, beta)
