import nki
import nki.isa as nisa
import nki.language as nl

TILE_M = 128
TILE_N = 512


def _matmul_block(out, a_t, b, m0, n0):
    """One 128 x 512 output block: nl.load convenience loads, nc_matmul accumulation over K, nl.store."""
    K = a_t.shape[0]
    TILE_K = nl.tile_size.pmax
    acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
    for k in range(K // TILE_K):
        lhs_t = nl.load(a_t[k * TILE_K:(k + 1) * TILE_K, m0:m0 + TILE_M])
        rhs = nl.load(b[k * TILE_K:(k + 1) * TILE_K, n0:n0 + TILE_N])
        nisa.nc_matmul(acc, lhs_t, rhs)
    res = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nl.store(out[m0:m0 + TILE_M, n0:n0 + TILE_N], res)


@nki.jit
def matmul_grid_kernel(a_t, b):
    """out = a_t.T @ b. The new API has no multi-dimensional SPMD grid, so the (M/128, N/512)
    block grid of the classic variant becomes two unrolled loops over a helper (no @nki.jit on it)."""
    K, M = a_t.shape
    _, N = b.shape
    assert K % nl.tile_size.pmax == 0 and M % TILE_M == 0 and N % TILE_N == 0
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for pm in range(M // TILE_M):
        for pn in range(N // TILE_N):
            _matmul_block(out, a_t, b, pm * TILE_M, pn * TILE_N)
    return out
