import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def relu_kernel(x):
    """ReLU of a (B, S, H) tensor; each batch's S rows (S <= 128) form one tile."""
    B, S, H = x.shape
    assert S <= nl.tile_size.pmax
    out = nl.ndarray((B, S, H), dtype=x.dtype, buffer=nl.shared_hbm)

    for b in nl.affine_range(B):
        x_tile = nl.load(x[b, 0:S, 0:H])
        y_tile = nisa.activation(op=nl.relu, data=x_tile)
        nl.store(out[b, 0:S, 0:H], value=y_tile)
    return out
