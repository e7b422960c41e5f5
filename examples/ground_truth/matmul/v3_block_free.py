# nki-task: task_small.py
"""Matmul tutorial, "Optimization 2": blocking the free dimensions (published: 22.07 ms P99 on trn1).

M is processed in blocks of TILES_IN_BLOCK_M x 128 rows and N in blocks of TILES_IN_BLOCK_N x 512
columns (2 and 2 in the tutorial). A block's lhsT strips (all of K) are fetched once per m block and
its rhs strips once per (m block, n block); every pair of tiles inside the two blocks is multiplied
from SBUF, so each byte fetched feeds more matmuls than in v2.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def matmul_block_free(lhsT, rhs):
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2, "contraction sizes differ"
    TM = nl.tile_size.gemm_stationary_fmax
    TK = nl.tile_size.pmax
    TN = nl.tile_size.gemm_moving_fmax
    BM_TILES = 2  # TILES_IN_BLOCK_M
    BN_TILES = 2  # TILES_IN_BLOCK_N
    BM = TM * BM_TILES  # 256 rows of the result per block
    BN = TN * BN_TILES  # 1024 columns of the result per block
    assert M % BM == 0 and N % BN == 0 and K % TK == 0
    KT = K // TK
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    for mb in nl.affine_range(M // BM):
        a_blk = nl.ndarray((TK, BM_TILES, KT, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
        for bm in nl.affine_range(BM_TILES):
            col0 = (mb * BM_TILES + bm) * TM
            for ki in nl.affine_range(KT):
                a_blk[:, bm, ki, :] = nl.load(lhsT[ki * TK:(ki + 1) * TK, col0:col0 + TM])

        for nb in nl.affine_range(N // BN):
            b_blk = nl.ndarray((TK, BN_TILES, KT, TN), dtype=rhs.dtype, buffer=nl.sbuf)
            for bn in nl.affine_range(BN_TILES):
                col0 = (nb * BN_TILES + bn) * TN
                for ki in nl.affine_range(KT):
                    b_blk[:, bn, ki, :] = nl.load(rhs[ki * TK:(ki + 1) * TK, col0:col0 + TN])

            for bm in nl.affine_range(BM_TILES):
                for bn in nl.affine_range(BN_TILES):
                    acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
                    for ki in nl.affine_range(KT):
                        acc += nl.matmul(a_blk[:, bm, ki, :], b_blk[:, bn, ki, :], transpose_x=True)
                    o_t = nl.copy(acc, dtype=out.dtype)
                    r0 = (mb * BM_TILES + bm) * TM
                    c0 = (nb * BN_TILES + bn) * TN
                    nl.store(out[r0:r0 + TM, c0:c0 + TN], value=o_t)
    return out
