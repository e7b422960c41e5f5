"""Mamba selective scan, b1 s512 c4096 n16 (the tutorial's 4K-channel shape) (fp32). Inputs: delta, u (b, c, s); A (c, n); B, C (b, n, s)."""
from scan_reference import make_inputs, selective_scan

TARGET = "trn1"


def get_inputs():
    return make_inputs(batch=1, channels=4096, seq=512, state=16)


def reference(delta, u, A, B, C):
    return selective_scan(delta, u, A, B, C)


TOLERANCE = {"atol": 1e-4, "rtol": 1e-3}
