import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def row_sum_kernel(x):
    """out[i, 0] = sum_j x[i, j]; rows on partitions, reduction along the free axis."""
    N, D = x.shape
    P = nl.tile_size.pmax
    assert N % P == 0
    out = nl.ndarray((N, 1), dtype=x.dtype, buffer=nl.shared_hbm)

    for t in range(N // P):
        x_tile = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_tile, src=x[t * P:(t + 1) * P, :])
        s_tile = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=s_tile, op=nl.add, data=x_tile, axis=1)
        nisa.dma_copy(dst=out[t * P:(t + 1) * P, :], src=s_tile)
    return out
