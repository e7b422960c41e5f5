import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def relu_kernel(x):
    """ReLU of a (B, S, H) tensor; each batch's S rows (S <= 128) form one tile."""
    B, S, H = x.shape
    assert S <= nl.tile_size.pmax
    out = nl.ndarray((B, S, H), dtype=x.dtype, buffer=nl.shared_hbm)

    for b in range(B):
        x_tile = nl.ndarray((S, H), dtype=x.dtype, buffer=nl.sbuf)
        y_tile = nl.ndarray((S, H), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_tile, src=x[b, :, :])
        nisa.activation(dst=y_tile, op=nl.relu, data=x_tile)
        nisa.dma_copy(dst=out[b, :, :], src=y_tile)
    return out
