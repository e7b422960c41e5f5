"""RMSNorm y = x / sqrt(mean(x^2, axis=-1) + 1e-6), x (512, 1024), for verification fp32 (weight all ones, as in the ATX reference)."""
import numpy as np

EPS = 1e-6
TARGET = "trn1"


def get_inputs():
    rng = np.random.default_rng(np.random.randint(2**31))
    return [rng.standard_normal((512, 1024), dtype=np.float32)]


def reference(x):
    x64 = x.astype(np.float64)
    return (x64 / np.sqrt(np.mean(x64 * x64, axis=1, keepdims=True) + EPS)).astype(np.float32)


TOLERANCE = {"atol": 1e-5, "rtol": 1e-4}
