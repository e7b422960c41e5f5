"""Mamba selective scan, small verification shape b2 c256 s1024 n4 (two sequence chunks for v3) (fp32). Inputs: delta, u (b, c, s); A (c, n); B, C (b, n, s)."""
from scan_reference import make_inputs, selective_scan

TARGET = "trn1"


def get_inputs():
    return make_inputs(batch=2, channels=256, seq=1024, state=4)


def reference(delta, u, A, B, C):
    return selective_scan(delta, u, A, B, C)


TOLERANCE = {"atol": 1e-4, "rtol": 1e-3}
