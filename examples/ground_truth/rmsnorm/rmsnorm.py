# nki-task: task_small.py
"""RMSNorm over the hidden axis, fp32 (published: p50 544 us on trn1.2xlarge at 4096 x 4096, the ATX
CUDA->NKI migration report; 50 runs after 5 warm-up runs).

The measured kernel takes x only (its reference's weight is all ones and the generated kernel does
not apply it), so this kernel does not take a weight either. Per 128-row tile: one load of the
whole [128, H] row block, x*x, row sum, sum/H + eps, rsqrt, x * rsqrt, one store: memory bound
(64 MiB in, 64 MiB out at the published size).
"""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

EPS = 1e-6


@nki.jit
def rmsnorm(x):
    n_rows, hidden = x.shape
    P = nl.tile_size.pmax
    assert n_rows % P == 0, "rows must be a multiple of 128"
    out = nl.ndarray((n_rows, hidden), dtype=x.dtype, buffer=nl.shared_hbm)
    inv_h = 1.0 / hidden

    for t in nl.affine_range(n_rows // P):
        xt = nl.load(x[t * P:(t + 1) * P, 0:hidden])
        sq = nl.multiply(xt, xt)
        ss = nl.sum(sq, axis=1, keepdims=True)          # (128, 1) sum of squares per row
        ms = nl.add(nl.multiply(ss, inv_h), EPS)        # mean square + eps
        inv_rms = nl.rsqrt(ms)
        yt = nl.multiply(xt, inv_rms)                   # (128, 1) broadcast along the row
        nl.store(out[t * P:(t + 1) * P, 0:hidden], value=yt)
    return out
