import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def matmul_kernel(a_t, b):
    """out[M, N] = a_t.T @ b with a_t: [K, M], b: [K, N].

    Output blocks of 128 x 512 (one PSUM bank); the K loop accumulates into the same PSUM tile.
    """
    K, M = a_t.shape
    K2, N = b.shape
    assert K == K2
    TILE_K = nl.tile_size.pmax                 # 128: contraction on partitions
    TILE_M = nl.tile_size.gemm_stationary_fmax  # 128
    TILE_N = nl.tile_size.gemm_moving_fmax      # 512
    assert K % TILE_K == 0 and M % TILE_M == 0 and N % TILE_N == 0
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)

    i_k = nl.arange(TILE_K)[:, None]
    i_m = nl.arange(TILE_M)[None, :]
    i_n = nl.arange(TILE_N)[None, :]
    i_om = nl.arange(TILE_M)[:, None]

    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            acc = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                lhs_t = nl.load(a_t[k * TILE_K + i_k, m * TILE_M + i_m])   # [128 K, 128 M]
                rhs = nl.load(b[k * TILE_K + i_k, n * TILE_N + i_n])       # [128 K, 512 N]
                acc += nisa.nc_matmul(lhs_t, rhs)
            res = nl.copy(acc, dtype=nl.float32)
            nl.store(out[m * TILE_M + i_om, n * TILE_N + i_n], value=res)
    return out
