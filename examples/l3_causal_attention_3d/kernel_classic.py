import math

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

MASK_VALUE = -30000.0


@nki.jit
def causal_attention_kernel(q, k, v):
    """Per head h: softmax(causal(q[h] @ k[h].T / sqrt(d))) @ v[h]; q, k, v: [H, S, d].

    Scores for a 128-query block are computed against all S keys, the upper triangle is replaced
    with a large negative value by GpSimd affine_select (predicate: query index - key index >= 0),
    then softmax and P @ V as in the non-causal kernel.
    """
    H, S, D = q.shape
    P = nl.tile_size.pmax
    assert S % P == 0 and D <= P and S <= nl.tile_size.gemm_moving_fmax
    scale = 1.0 / math.sqrt(D)
    out = nl.ndarray((H, S, D), dtype=q.dtype, buffer=nl.shared_hbm)

    i_q = nl.arange(P)[:, None]
    i_k = nl.arange(S)[None, :]

    for h in nl.affine_range(H):
        k_t = nl.ndarray((D, S), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(S // P):
            k_blk = nl.load(k[h, j * P:(j + 1) * P, 0:D])
            k_t[:, j * P:(j + 1) * P] = nl.copy(nisa.nc_transpose(k_blk))

        for i in nl.affine_range(S // P):
            q_blk = nl.load(q[h, i * P:(i + 1) * P, 0:D])
            q_t = nl.copy(nisa.nc_transpose(q_blk))                      # [d, 128 q]
            scores = nl.copy(nisa.nc_matmul(q_t, k_t))                   # SBUF [128 q, S]
            masked = nisa.affine_select(pred=(i * P + i_q - i_k >= 0), on_true_tile=scores,
                                        on_false_value=MASK_VALUE)

            row_max = nl.max(masked, axis=1, keepdims=True)
            neg_max = nl.multiply(row_max, -scale)
            probs = nisa.activation(op=nl.exp, data=masked, bias=neg_max, scale=scale)
            inv_sum = nl.reciprocal(nl.sum(probs, axis=1, keepdims=True))

            acc = nl.zeros((P, D), nl.float32, buffer=nl.psum)
            for j in nl.affine_range(S // P):
                p_t = nl.copy(nisa.nc_transpose(probs[:, j * P:(j + 1) * P]))
                v_blk = nl.load(v[h, j * P:(j + 1) * P, 0:D])
                acc += nisa.nc_matmul(p_t, v_blk)
            o_blk = nl.multiply(acc, inv_sum)
            nl.store(out[h, i * P:(i + 1) * P, 0:D], value=o_blk)
    return out
