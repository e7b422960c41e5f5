import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def add_kernel(a, b):
    """out = a + b for 2-D HBM tensors of any row count (last tile clamped with min())."""
    n_rows, n_cols = a.shape
    out = nl.ndarray((n_rows, n_cols), dtype=a.dtype, buffer=nl.shared_hbm)

    P = nl.tile_size.pmax
    for r0 in range(0, n_rows, P):
        rows = min(P, n_rows - r0)
        a_tile = nl.ndarray((rows, n_cols), dtype=a.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray((rows, n_cols), dtype=b.dtype, buffer=nl.sbuf)
        c_tile = nl.ndarray((rows, n_cols), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_tile, src=a[r0:r0 + rows, :])
        nisa.dma_copy(dst=b_tile, src=b[r0:r0 + rows, :])
        nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)
        nisa.dma_copy(dst=out[r0:r0 + rows, :], src=c_tile)
    return out
