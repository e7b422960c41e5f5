# nki-task: task_small.py
"""Matmul tutorial, "Original tiled" version (published: 51.80 ms P99 on trn1 at lhsT [8192, 4096] x rhs [8192, 8192] bf16).

result[M, N] = lhsT.T @ rhs. Every (m, n, k) step fetches its own 128x128 stationary tile and
128x512 moving tile from HBM, so each input tile is re-read many times (memory bound).
"""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def matmul_tiled(lhsT, rhs):
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2, "contraction sizes differ"
    TM = nl.tile_size.gemm_stationary_fmax  # 128 output rows per matmul
    TK = nl.tile_size.pmax                  # 128 contraction rows (partitions)
    TN = nl.tile_size.gemm_moving_fmax      # 512 output columns (one PSUM bank)
    assert M % TM == 0 and K % TK == 0 and N % TN == 0
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    for mi in nl.affine_range(M // TM):
        for ni in nl.affine_range(N // TN):
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for ki in nl.affine_range(K // TK):
                a_t = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                b_t = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                a_t[...] = nl.load(lhsT[ki * TK:(ki + 1) * TK, mi * TM:(mi + 1) * TM])
                b_t[...] = nl.load(rhs[ki * TK:(ki + 1) * TK, ni * TN:(ni + 1) * TN])
                acc += nl.matmul(a_t[...], b_t[...], transpose_x=True)
            # PSUM (fp32) -> SBUF in the output dtype, then out to HBM
            o_t = nl.copy(acc, dtype=out.dtype)
            nl.store(out[mi * TM:(mi + 1) * TM, ni * TN:(ni + 1) * TN], value=o_t)
    return out
