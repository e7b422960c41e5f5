import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def gelu_kernel(x):
    """GELU of a (N, D) tensor, 128 rows per tile, on the Scalar engine."""
    N, D = x.shape
    P = nl.tile_size.pmax
    assert N % P == 0
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)

    for t in range(N // P):
        x_tile = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_tile, src=x[t * P:(t + 1) * P, :])
        y_tile = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.activation(dst=y_tile, op=nl.gelu, data=x_tile)
        nisa.dma_copy(dst=out[t * P:(t + 1) * P, :], src=y_tile)
    return out
