import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def softmax_kernel(x):
    """Row softmax: rows on partitions; max / exp / sum / scale along the free axis."""
    N, D = x.shape
    P = nl.tile_size.pmax
    assert N % P == 0
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)

    for t in range(N // P):
        x_tile = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_tile, src=x[t * P:(t + 1) * P, :])

        neg_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=x_tile, axis=1, negate=True)

        e_tile = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e_tile, op=nl.exp, data=x_tile, bias=neg_max, scale=1.0)

        row_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=row_sum, op=nl.add, data=e_tile, axis=1)
        inv_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=inv_sum, data=row_sum)

        y_tile = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y_tile, data=e_tile, op0=nl.multiply, operand0=inv_sum)
        nisa.dma_copy(dst=out[t * P:(t + 1) * P, :], src=y_tile)
    return out
