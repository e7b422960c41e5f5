# nki-task: task_small.py
"""Fused Mamba tutorial, mamba_v3 (published on trn1 by neuron-profile, c4096 n16 b1: 3.3 / 6.6 / 13.3 /
27.8 ms at seq 1024 / 2048 / 4096 / 8192).

v2 plus tiling of the sequence inside the state loop in chunks of 512: every intermediate is
[128, 512]; the scan's last column is carried into the next chunk's scan as its initial value, so
the chunk loop is a static_range (unrolled, carried dependency) as in the tutorial. delta, u and
the accumulator stay whole-sequence tiles.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl

SEQ_TILE = 512  # chosen empirically in the tutorial


@nki.jit
def mamba_v3(delta, u, A, B, C):
    """delta, u: (batch, channels, seq); A: (channels, state); B, C: (batch, state, seq)."""
    n_batch, n_chan, seq = delta.shape
    _, n_state = A.shape
    P = nl.tile_size.pmax
    F = SEQ_TILE
    assert n_chan % P == 0, "channels must be a multiple of 128"
    assert seq % F == 0, "seq_len must be a multiple of 512"
    n_ct = n_chan // P
    n_st = seq // F
    out = nl.ndarray((n_batch, n_chan, seq), dtype=delta.dtype, buffer=nl.shared_hbm)

    for b in nl.affine_range(n_batch):
        for ct in nl.affine_range(n_ct):
            c0 = ct * P
            y_acc = nl.zeros((P, seq), dtype=delta.dtype, buffer=nl.sbuf)
            dlt = nl.load(delta[b, c0:c0 + P, 0:seq])
            u_t = nl.load(u[b, c0:c0 + P, 0:seq])

            for s in nl.affine_range(n_state):
                a_col = nl.load(A[c0:c0 + P, s:s + 1])
                # scan state handed from one sequence chunk to the next
                carry = nl.zeros((P, 1), dtype=delta.dtype, buffer=nl.sbuf)

                for j in nl.static_range(n_st):
                    t0 = j * F
                    dA = nisa.activation(op=nl.exp, data=dlt[:, t0:t0 + F], scale=a_col)

                    b_row = nl.load(B[b, s:s + 1, t0:t0 + F])
                    du = nisa.tensor_tensor(dlt[:, t0:t0 + F], u_t[:, t0:t0 + F], op=nl.multiply)
                    b_all = nl.broadcast_to(b_row, shape=(P, F))
                    dBu = nisa.tensor_tensor(du, b_all, op=nl.multiply)

                    h = nisa.tensor_tensor_scan(dA, dBu, initial=carry, op0=nl.multiply, op1=nl.add)
                    carry[...] = h[:, F - 1:F]

                    c_row = nl.load(C[b, s:s + 1, t0:t0 + F])
                    c_all = nl.broadcast_to(c_row, shape=(P, F))
                    y = nisa.tensor_tensor(h, c_all, op=nl.multiply)
                    y_acc[:, t0:t0 + F] += y

            nl.store(out[b, c0:c0 + P, 0:seq], value=y_acc)
    return out
