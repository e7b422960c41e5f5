# nki-task: task_small.py
"""Matmul tutorial, "Optimization 1" (published: 42.96 ms P99 on trn1, same shape as v1).

The stationary (lhsT) column strip for one m is fetched once, before the n loop, and reused for
every n; the moving (rhs) strip is fetched once per (m, n) into SBUF, then the k loop only multiplies.
(The tutorial's strip buffer for lhsT was declared 512 wide although 128 columns are used; here it
is declared at the size actually used.)
"""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def matmul_hoisted(lhsT, rhs):
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2, "contraction sizes differ"
    TM = nl.tile_size.gemm_stationary_fmax
    TK = nl.tile_size.pmax
    TN = nl.tile_size.gemm_moving_fmax
    assert M % TM == 0 and K % TK == 0 and N % TN == 0
    KT = K // TK
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    for mi in nl.affine_range(M // TM):
        # all K tiles of lhsT's m-th column strip: [128 partitions, KT, 128]
        a_strip = nl.ndarray((TK, KT, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
        for ki in nl.affine_range(KT):
            a_strip[:, ki, :] = nl.load(lhsT[ki * TK:(ki + 1) * TK, mi * TM:(mi + 1) * TM])

        for ni in nl.affine_range(N // TN):
            b_strip = nl.ndarray((TK, KT, TN), dtype=rhs.dtype, buffer=nl.sbuf)
            for ki in nl.affine_range(KT):
                b_strip[:, ki, :] = nl.load(rhs[ki * TK:(ki + 1) * TK, ni * TN:(ni + 1) * TN])

            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for ki in nl.affine_range(KT):
                acc += nl.matmul(a_strip[:, ki, :], b_strip[:, ki, :], transpose_x=True)
            o_t = nl.copy(acc, dtype=out.dtype)
            nl.store(out[mi * TM:(mi + 1) * TM, ni * TN:(ni + 1) * TN], value=o_t)
    return out
