import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

TILE_M = 128
TILE_N = 512


@nki.jit
def matmul_grid_kernel(a_t, b):
    """out = a_t.T @ b. Launch with grid (M // 128, N // 512): program (pm, pn) computes the
    128 x 512 output block at rows pm*128, columns pn*512, accumulating K in one PSUM tile."""
    K, M = a_t.shape
    _, N = b.shape
    TILE_K = nl.tile_size.pmax
    assert K % TILE_K == 0
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)

    pm = nl.program_id(0)
    pn = nl.program_id(1)
    m0 = pm * TILE_M
    n0 = pn * TILE_N

    acc = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // TILE_K):
        lhs_t = nl.load(a_t[k * TILE_K:(k + 1) * TILE_K, m0:m0 + TILE_M])
        rhs = nl.load(b[k * TILE_K:(k + 1) * TILE_K, n0:n0 + TILE_N])
        acc += nl.matmul(lhs_t, rhs, transpose_x=True)
    res = nl.copy(acc, dtype=nl.float32)
    nl.store(out[m0:m0 + TILE_M, n0:n0 + TILE_N], value=res)
    return out
