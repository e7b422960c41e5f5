import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def softmax_kernel(x):
    """Row softmax: rows on partitions; max / exp / sum / scale along the free axis."""
    N, D = x.shape
    P = nl.tile_size.pmax
    assert N % P == 0
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)

    for t in nl.affine_range(N // P):
        x_tile = nl.load(x[t * P:(t + 1) * P, 0:D])
        row_max = nl.max(x_tile, axis=1, keepdims=True)                 # (P, 1)
        neg_max = nl.multiply(row_max, -1.0)
        # exp(x - max) on ScalarE: the (P, 1) bias is broadcast along the free axis
        e_tile = nisa.activation(op=nl.exp, data=x_tile, bias=neg_max, scale=1.0)
        row_sum = nl.sum(e_tile, axis=1, keepdims=True)                 # (P, 1)
        inv_sum = nl.reciprocal(row_sum)
        y_tile = nl.multiply(e_tile, inv_sum)
        nl.store(out[t * P:(t + 1) * P, 0:D], value=y_tile)
    return out
