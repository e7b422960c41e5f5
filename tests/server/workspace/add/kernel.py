import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def add_kernel(a, b):
    """out = a + b for 2-D HBM tensors of any row count (last tile masked)."""
    n_rows, n_cols = a.shape
    out = nl.ndarray((n_rows, n_cols), dtype=a.dtype, buffer=nl.shared_hbm)

    P = nl.tile_size.pmax
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(n_cols)[None, :]

    n_tiles = (n_rows + P - 1) // P
    for t in nl.affine_range(n_tiles):
        rows = t * P + i_p
        a_tile = nl.load(a[rows, i_f], mask=(rows < n_rows))
        b_tile = nl.load(b[rows, i_f], mask=(rows < n_rows))
        c_tile = nl.add(a_tile, b_tile, mask=(rows < n_rows))
        nl.store(out[rows, i_f], value=c_tile, mask=(rows < n_rows))
    return out
