import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def transpose_kernel(x):
    """out = x.T, done block by block: each (128, 128) block is flipped on TensorE into PSUM."""
    R, C = x.shape
    B = nl.tile_size.pmax
    assert R % B == 0 and C % B == 0
    out = nl.ndarray((C, R), dtype=x.dtype, buffer=nl.shared_hbm)

    for i in range(R // B):
        for j in range(C // B):
            blk = nl.ndarray((B, B), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=blk, src=x[i * B:(i + 1) * B, j * B:(j + 1) * B])
            blk_t_psum = nl.ndarray((B, B), dtype=x.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=blk_t_psum, data=blk)
            blk_t = nl.ndarray((B, B), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=blk_t, src=blk_t_psum)
            nisa.dma_copy(dst=out[j * B:(j + 1) * B, i * B:(i + 1) * B], src=blk_t)
    return out
