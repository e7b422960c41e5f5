import math

import nki
import nki.isa as nisa
import nki.language as nl

MASK_VALUE = -30000.0


@nki.jit
def causal_attention_kernel(q, k, v):
    """Per head h: softmax(causal(q[h] @ k[h].T / sqrt(d))) @ v[h]; q, k, v: [H, S, d].

    Scores for a 128-query block are computed against all S keys, the upper triangle is replaced
    with a large negative value by GpSimd affine_select (value = q0 + p - f, keep where >= 0),
    then softmax and P @ V as in the non-causal kernel.
    """
    H, S, D = q.shape
    P = nl.tile_size.pmax
    assert S % P == 0 and D <= P and S <= nl.tile_size.gemm_moving_fmax
    scale = 1.0 / math.sqrt(D)
    out = nl.ndarray((H, S, D), dtype=q.dtype, buffer=nl.shared_hbm)

    for h in range(H):
        k_t = nl.ndarray((D, S), dtype=nl.float32, buffer=nl.sbuf)
        for j in range(S // P):
            k_blk = nl.ndarray((P, D), dtype=k.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=k_blk, src=k[h, j * P:(j + 1) * P, :])
            k_blk_t = nl.ndarray((D, P), dtype=k.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=k_blk_t, data=k_blk)
            nisa.tensor_copy(dst=k_t[:, j * P:(j + 1) * P], src=k_blk_t)

        for i in range(S // P):
            q_blk = nl.ndarray((P, D), dtype=q.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=q_blk, src=q[h, i * P:(i + 1) * P, :])
            q_t_psum = nl.ndarray((D, P), dtype=q.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=q_t_psum, data=q_blk)
            q_t = nl.ndarray((D, P), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=q_t, src=q_t_psum)

            scores_psum = nl.ndarray((P, S), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(scores_psum, q_t, k_t)
            scores = nl.ndarray((P, S), dtype=nl.float32, buffer=nl.sbuf)   # GpSimd cannot read PSUM
            nisa.tensor_copy(dst=scores, src=scores_psum)
            masked = nl.ndarray((P, S), dtype=nl.float32, buffer=nl.sbuf)
            nisa.affine_select(dst=masked, pattern=[[-1, S]], channel_multiplier=1,
                               on_true_tile=scores, on_false_value=MASK_VALUE,
                               cmp_op=nl.greater_equal, offset=i * P)

            neg_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=masked, axis=1, negate=True)
            bias = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=bias, data=neg_max, op0=nl.multiply, operand0=scale)
            probs = nl.ndarray((P, S), dtype=nl.float32, buffer=nl.sbuf)
            nisa.activation(dst=probs, op=nl.exp, data=masked, bias=bias, scale=scale)
            row_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_reduce(dst=row_sum, op=nl.add, data=probs, axis=1)
            inv_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.reciprocal(dst=inv_sum, data=row_sum)

            acc = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.psum)
            for j in range(S // P):
                p_t_psum = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
                nisa.nc_transpose(dst=p_t_psum, data=probs[:, j * P:(j + 1) * P])
                p_t = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_copy(dst=p_t, src=p_t_psum)
                v_blk = nl.ndarray((P, D), dtype=v.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=v_blk, src=v[h, j * P:(j + 1) * P, :])
                nisa.nc_matmul(acc, p_t, v_blk)

            o_blk = nl.ndarray((P, D), dtype=q.dtype, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=o_blk, data=acc, op0=nl.multiply, operand0=inv_sum)
            nisa.dma_copy(dst=out[h, i * P:(i + 1) * P, :], src=o_blk)
    return out
