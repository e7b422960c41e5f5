import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

ALPHA = 0.75


@nki.jit
def axpy_kernel(x, y):
    """out = ALPHA * x + y. Launch as axpy_kernel[G](x, y): program g owns rows [g*R, (g+1)*R)."""
    N, D = x.shape
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)

    g = nl.program_id(0)
    G = nl.num_programs(0)
    rows_per_program = N // G
    P = nl.tile_size.pmax
    assert rows_per_program % P == 0

    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(D)[None, :]
    for t in nl.affine_range(rows_per_program // P):
        r0 = g * rows_per_program + t * P
        x_tile = nl.load(x[r0 + i_p, i_f])
        y_tile = nl.load(y[r0 + i_p, i_f])
        # (x * ALPHA) + y in one VectorE instruction
        o_tile = nisa.scalar_tensor_tensor(data=x_tile, op0=nl.multiply, operand0=ALPHA,
                                           op1=nl.add, operand1=y_tile)
        nl.store(out[r0 + i_p, i_f], value=o_tile)
    return out
