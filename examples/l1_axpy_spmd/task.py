"""axpy out = alpha * x + y (alpha = 0.75) split over an SPMD grid of 2 programs (classic)."""
import numpy as np

ALPHA = 0.75


def get_inputs():
    x = np.random.randn(2048, 1024).astype(np.float32)
    y = np.random.randn(2048, 1024).astype(np.float32)
    return [x, y]


def reference(x, y):
    return (np.float32(ALPHA) * x + y).astype(np.float32)


TOLERANCE = {"atol": 1e-6, "rtol": 1e-6}
GRID = (2,)
KERNEL = "axpy_kernel"
LNC = 2  # new-API kernel: kernel[2](...) — two logical NeuronCores share the rows (trn2/trn3)
