# nki-task: task.py
"""LayerNorm tutorial, version 1 (published: p50 2311 us on trn1, fp32; measured at the
example script's perf-mode shape 4096 x 8192, see task_4096x8192.py).

Only nki.language calls: per 128-row tile, mean and E[x^2] with nl.mean, var = E[x^2] - mean^2,
then (x - mean) * rsqrt(var + eps) * gamma + beta as separate element-wise ops. The last, partial
row tile is handled with masks. (The tutorial passes epsilon as a kernel argument; the harness only
passes arrays, so here it is the module constant EPS = 1e-5, the tutorial's value.)
"""
import math

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

EPS = 1e-5


@nki.jit
def layernorm_v1(x, gamma, beta):
    n_rows, n_cols = x.shape
    assert gamma.shape[0] == n_cols and beta.shape[0] == n_cols
    P = nl.tile_size.pmax
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)

    ip = nl.arange(P)[:, None]
    jf = nl.arange(n_cols)[None, :]
    ip1 = nl.arange(1)[:, None]

    # gamma / beta: one row each, replicated over the partitions once and reused by every tile
    g_row = nl.load(gamma.reshape((1, n_cols))[ip1, jf])
    b_row = nl.load(beta.reshape((1, n_cols))[ip1, jf])
    g_all = nl.broadcast_to(g_row, shape=(P, n_cols))
    b_all = nl.broadcast_to(b_row, shape=(P, n_cols))

    for t in nl.affine_range(math.ceil(n_rows / P)):
        rows = t * P + ip
        xt = nl.load(x[rows, jf], mask=(rows < n_rows))

        mu = nl.mean(xt, axis=1)
        ex2 = nl.mean(nl.square(xt), axis=1)
        var = ex2 - mu * mu
        xn = (xt - mu) * nl.rsqrt(var + EPS)
        yt = xn * g_all + b_all

        nl.store(out[rows, jf], value=yt, mask=(rows < n_rows))
    return out
