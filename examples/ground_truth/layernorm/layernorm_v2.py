# nki-task: task.py
"""LayerNorm tutorial, version 2 (published: p50 1969 us on trn1, fp32; measured at the
example script's perf-mode shape 4096 x 8192, see task_4096x8192.py).

Mean and variance come from nisa.bn_stats over 512-wide chunks (the last one only as wide as the
remaining columns) combined by nisa.bn_aggr; centring and scaling are fused into one nisa.tensor_scalar
(subtract mean, multiply by rsqrt(var + eps)); gamma and beta as in v1. EPS is a module constant
(the harness passes arrays only; the tutorial's value is 1e-5).
"""
import math

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

EPS = 1e-5


@nki.jit
def layernorm_v2(x, gamma, beta):
    n_rows, n_cols = x.shape
    assert gamma.shape[0] == n_cols and beta.shape[0] == n_cols
    P = nl.tile_size.pmax
    FB = nl.tile_size.bn_stats_fmax  # 512
    n_chunks = math.ceil(n_cols / FB)
    n_full = n_cols // FB  # whole 512-column chunks
    tail = n_cols - n_full * FB  # width of the last, partial chunk (0: none)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)

    ip = nl.arange(P)[:, None]
    jf = nl.arange(n_cols)[None, :]
    ip1 = nl.arange(1)[:, None]
    jc = nl.arange(FB)[None, :]
    j6 = nl.arange(6)[None, :]
    j_all_stats = nl.arange(6 * n_chunks)[None, :]

    g_row = nl.load(gamma.reshape((1, n_cols))[ip1, jf])
    b_row = nl.load(beta.reshape((1, n_cols))[ip1, jf])
    g_all = nl.broadcast_to(g_row, shape=(P, n_cols))
    b_all = nl.broadcast_to(b_row, shape=(P, n_cols))

    for t in nl.affine_range(math.ceil(n_rows / P)):
        rows = t * P + ip
        xt = nl.load(x[rows, jf], mask=(rows < n_rows))

        # six partial statistics per 512-column chunk, then one aggregation to (mean, var); the
        # tutorial masks the last chunk's columns, here the ragged tail chunk is a separate call
        stats = nl.ndarray((P, 6 * n_chunks), dtype=nl.float32, buffer=nl.sbuf)
        for c in nl.affine_range(n_full):
            stats[ip, c * 6 + j6] = nisa.bn_stats(xt[ip, c * FB + jc], dtype=nl.float32)
        if tail:
            jt = nl.arange(tail)[None, :]
            stats[ip, n_full * 6 + j6] = nisa.bn_stats(xt[ip, n_full * FB + jt], dtype=nl.float32)
        mv = nisa.bn_aggr(stats[ip, j_all_stats])
        mu = mv[ip, 0]
        var = mv[ip, 1]
        rstd = nl.rsqrt(var + EPS)

        # (x - mean) * rstd in a single two-op VectorE instruction
        xn = nisa.tensor_scalar(data=xt, op0=nl.subtract, operand0=mu, op1=nl.multiply, operand1=rstd)
        yt = xn * g_all + b_all

        nl.store(out[rows, jf], value=yt, mask=(rows < n_rows))
    return out
