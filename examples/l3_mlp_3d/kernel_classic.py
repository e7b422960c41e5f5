import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def mlp_kernel(x, w1, w2):
    """y = silu(x @ w1) @ w2 for x: [B, S, D] (S == 128), w1: [D, F], w2: [F, D].

    The hidden activation is produced already transposed (h^T: [F, S]) by using w1 blocks as the
    stationary operand, so it can feed the second matmul (contraction over F) with no transpose.
    Only x needs a TensorE transpose (x^T: [D, S]).
    """
    B, S, D = x.shape
    D2, F = w1.shape
    P = nl.tile_size.pmax
    assert S == P and D == D2 and w2.shape == (F, D)
    assert D % P == 0 and F % P == 0 and D <= nl.tile_size.gemm_moving_fmax
    KD = D // P   # contraction tiles of the first matmul
    KF = F // P   # contraction tiles of the second matmul
    out = nl.ndarray((B, S, D), dtype=x.dtype, buffer=nl.shared_hbm)

    for b in nl.affine_range(B):
        x_tile = nl.load(x[b, 0:S, 0:D])                                  # [S, D]

        # x^T laid out as KD blocks of [128 d, S] side by side
        x_t = nl.ndarray((P, KD * S), dtype=nl.float32, buffer=nl.sbuf)
        for kd in nl.affine_range(KD):
            x_t[:, kd * S:(kd + 1) * S] = nl.copy(nisa.nc_transpose(x_tile[:, kd * P:(kd + 1) * P]))

        # h^T = silu(w1^T @ x^T), KF blocks of [128 f, S]
        h_t = nl.ndarray((P, KF * S), dtype=nl.float32, buffer=nl.sbuf)
        for kf in nl.affine_range(KF):
            h_psum = nl.zeros((P, S), nl.float32, buffer=nl.psum)
            for kd in nl.affine_range(KD):
                w1_blk = nl.load(w1[kd * P:(kd + 1) * P, kf * P:(kf + 1) * P])   # [128 d, 128 f]
                h_psum += nisa.nc_matmul(w1_blk, x_t[:, kd * S:(kd + 1) * S])
            h_t[:, kf * S:(kf + 1) * S] = nisa.activation(op=nl.silu, data=h_psum)

        # y = h @ w2: contraction over f on partitions, accumulated over KF blocks
        y_psum = nl.zeros((S, D), nl.float32, buffer=nl.psum)
        for kf in nl.affine_range(KF):
            w2_blk = nl.load(w2[kf * P:(kf + 1) * P, 0:D])                   # [128 f, D]
            y_psum += nisa.nc_matmul(h_t[:, kf * S:(kf + 1) * S], w2_blk)
        y_tile = nl.copy(y_psum, dtype=x.dtype)
        nl.store(out[b, 0:S, 0:D], value=y_tile)
    return out
