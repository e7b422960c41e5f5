import nki
import nki.isa as nisa
import nki.language as nl

ALPHA = 0.75


@nki.jit
def axpy_kernel(x, y):
    """out = ALPHA * x + y, 128 rows per tile (single program; the classic variant uses a grid)."""
    N, D = x.shape
    P = nl.tile_size.pmax
    assert N % P == 0
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)

    for t in range(N // P):
        x_tile = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        y_tile = nl.ndarray((P, D), dtype=y.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_tile, src=x[t * P:(t + 1) * P, :])
        nisa.dma_copy(dst=y_tile, src=y[t * P:(t + 1) * P, :])
        ax_tile = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=ax_tile, data=x_tile, op0=nl.multiply, operand0=ALPHA)
        o_tile = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=o_tile, data1=ax_tile, data2=y_tile, op=nl.add)
        nisa.dma_copy(dst=out[t * P:(t + 1) * P, :], src=o_tile)
    return out
