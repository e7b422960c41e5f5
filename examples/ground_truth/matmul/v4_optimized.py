# nki-task: task_small_v4.py
"""Matmul tutorial, "Optimization 3": all three dimensions blocked (published: 6.97 ms P99 on trn1).

Block sizes default to the tutorial's plan for lhsT [8192, 4096] x rhs [8192, 8192]: 16 tiles
(2048 rows) of M, 2 tiles (1024 columns) of N, 8 tiles (1024) of K. For each N block the result
rows of every M block stay in SBUF (in the output dtype) while the K blocks are walked in order
(sequential_range: the loop carries the partial sums); each K block's partial product is added
onto them from PSUM. Loads fetch whole block rows (128 x BLOCK_N, 128 x BLOCK_M) and the result is
packed into 128 x BLOCK_N rows before it is written out, so every DMA is large.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matmul_fully_optimized(lhsT, rhs, TILES_IN_BLOCK_M=16, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8):
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2, "contraction sizes differ"
    TM = nl.tile_size.gemm_stationary_fmax
    TK = nl.tile_size.pmax
    TN = nl.tile_size.gemm_moving_fmax
    BM = TM * TILES_IN_BLOCK_M
    BN = TN * TILES_IN_BLOCK_N
    BK = TK * TILES_IN_BLOCK_K
    assert M % BM == 0 and N % BN == 0 and K % BK == 0, "shape must be a multiple of the block sizes"
    n_mb, n_nb, n_kb = M // BM, N // BN, K // BK
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    for nb in nl.affine_range(n_nb):
        # result rows of this N block: [128 rows, M // 128 row tiles, N tiles in block, 512]
        res_sb = nl.zeros((TM, M // TM, TILES_IN_BLOCK_N, TN), dtype=lhsT.dtype, buffer=nl.sbuf)

        for kb in nl.sequential_range(n_kb):
            b_blk = nl.ndarray((TK, TILES_IN_BLOCK_K, BN), dtype=rhs.dtype, buffer=nl.sbuf)
            for bk in nl.affine_range(TILES_IN_BLOCK_K):
                k0 = (kb * TILES_IN_BLOCK_K + bk) * TK
                b_blk[:, bk, :] = nl.load(rhs[k0:k0 + TK, nb * BN:(nb + 1) * BN])

            for mb in nl.affine_range(n_mb):
                a_blk = nl.ndarray((TK, TILES_IN_BLOCK_K, BM), dtype=lhsT.dtype, buffer=nl.sbuf)
                for bk in nl.affine_range(TILES_IN_BLOCK_K):
                    k0 = (kb * TILES_IN_BLOCK_K + bk) * TK
                    a_blk[:, bk, :] = nl.load(lhsT[k0:k0 + TK, mb * BM:(mb + 1) * BM])

                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    for bm in nl.affine_range(TILES_IN_BLOCK_M):
                        part = nl.zeros((TM, TN), dtype=nl.float32, buffer=nl.psum)
                        for bk in nl.affine_range(TILES_IN_BLOCK_K):
                            part += nisa.nc_matmul(a_blk[:, bk, bm * TM:(bm + 1) * TM],
                                                   b_blk[:, bk, bn * TN:(bn + 1) * TN])
                        # fold this K block's partial product into the SBUF-resident result
                        res_sb[:, mb * TILES_IN_BLOCK_M + bm, bn, :] += part

        # write the N block out, one 128 x BLOCK_N row strip per DMA
        for mb in nl.affine_range(n_mb):
            for bm in nl.affine_range(TILES_IN_BLOCK_M):
                row_t = mb * TILES_IN_BLOCK_M + bm
                strip = nl.ndarray((TM, BN), dtype=res_sb.dtype, buffer=nl.sbuf)
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    strip[:, bn * TN:(bn + 1) * TN] = nl.copy(res_sb[:, row_t, bn, :])
                nl.store(out[row_t * TM:(row_t + 1) * TM, nb * BN:(nb + 1) * BN], value=strip)
    return out
