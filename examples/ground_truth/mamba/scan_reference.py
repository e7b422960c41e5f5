"""Input generator and NumPy reference shared by the mamba task files (a helper module, not a task)."""
import numpy as np


def make_inputs(batch, channels, seq, state):
    """delta in [0.01, 0.1) (a softplus-sized step), A in (-4, -0.5] (decay), u/B/C standard normal; fp32."""
    rng = np.random.default_rng(np.random.randint(2**31))
    f32 = np.float32
    delta = (rng.random((batch, channels, seq), dtype=f32) * f32(0.09) + f32(0.01))
    u = rng.standard_normal((batch, channels, seq), dtype=f32)
    A = -(rng.random((channels, state), dtype=f32) * f32(3.5) + f32(0.5))
    B = rng.standard_normal((batch, state, seq), dtype=f32)
    C = rng.standard_normal((batch, state, seq), dtype=f32)
    return [delta, u, A, B, C]


def selective_scan(delta, u, A, B, C):
    """y[b, c, t] = sum_n C[b, n, t] * h_n[b, c, t], h_n[t] = exp(delta*A[c, n]) * h_n[t-1] + delta*u*B[b, n, t]."""
    batch, channels, seq = delta.shape
    state = A.shape[1]
    d = delta.astype(np.float64)
    du = d * u.astype(np.float64)
    y = np.zeros((batch, channels, seq), dtype=np.float64)
    for n in range(state):
        dA = np.exp(d * A[None, :, n:n + 1].astype(np.float64))
        dBu = du * B[:, None, n, :].astype(np.float64)
        h = np.empty_like(dBu)
        prev = np.zeros((batch, channels), dtype=np.float64)
        for t in range(seq):
            prev = dA[:, :, t] * prev + dBu[:, :, t]
            h[:, :, t] = prev
        y += h * C[:, None, n, :].astype(np.float64)
    return y.astype(np.float32)
