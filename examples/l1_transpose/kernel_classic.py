import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def transpose_kernel(x):
    """out = x.T, done block by block: each (128, 128) block is flipped on TensorE into PSUM."""
    R, C = x.shape
    B = nl.tile_size.pmax
    assert R % B == 0 and C % B == 0
    out = nl.ndarray((C, R), dtype=x.dtype, buffer=nl.shared_hbm)

    for i in nl.affine_range(R // B):
        for j in nl.affine_range(C // B):
            blk = nl.load(x[i * B:(i + 1) * B, j * B:(j + 1) * B])
            blk_t_psum = nisa.nc_transpose(blk)                 # PSUM (B, B)
            blk_t = nl.copy(blk_t_psum, dtype=x.dtype)          # evict to SBUF
            nl.store(out[j * B:(j + 1) * B, i * B:(i + 1) * B], value=blk_t)
    return out
