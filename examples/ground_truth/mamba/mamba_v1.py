# nki-task: task_small.py
"""Fused Mamba tutorial, mamba_v1 (published on trn1 by neuron-profile: 172.93 us at b1 s512 c256 n16;
2.34 ms at c4096).

Selective scan, per batch b, state n and 128-channel tile:
    dA  = exp(delta * A[:, n])            (ScalarE activation with a per-partition scale)
    dBu = delta * u * B[b, n, :]          (two VectorE tensor_tensor, B broadcast over partitions)
    h   = scan(h[t] = dA[t] * h[t-1] + dBu[t])   (one tensor_tensor_scan along the sequence)
    y  += h * C[b, n, :]                  (accumulated over states in SBUF)
Loop order as in the tutorial's first version: states outside, channel tiles inside, so delta and u
are fetched again for every state; the accumulator holds every channel tile of the batch.
"""
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def mamba_v1(delta, u, A, B, C):
    """delta, u: (batch, channels, seq); A: (channels, state); B, C: (batch, state, seq)."""
    n_batch, n_chan, seq = delta.shape
    _, n_state = A.shape
    P = nl.tile_size.pmax
    assert n_chan % P == 0, "channels must be a multiple of 128"
    n_ct = n_chan // P
    out = nl.ndarray((n_batch, n_chan, seq), dtype=delta.dtype, buffer=nl.shared_hbm)

    for b in nl.affine_range(n_batch):
        # running sum over states, for all channel tiles of this batch: [128, tiles, seq]
        y_acc = nl.zeros((P, n_ct, seq), dtype=delta.dtype, buffer=nl.sbuf)

        for s in nl.affine_range(n_state):
            for ct in nl.affine_range(n_ct):
                c0 = ct * P
                dlt = nl.load(delta[b, c0:c0 + P, 0:seq])
                a_col = nl.load(A[c0:c0 + P, s:s + 1])
                # exp(delta * A): the multiply rides along as the activation's scale
                dA = nisa.activation(op=nl.exp, data=dlt, scale=a_col)

                u_t = nl.load(u[b, c0:c0 + P, 0:seq])
                b_row = nl.load(B[b, s:s + 1, 0:seq])
                du = nisa.tensor_tensor(dlt, u_t, op=nl.multiply)
                b_all = nl.broadcast_to(b_row, shape=(P, seq))
                dBu = nisa.tensor_tensor(du, b_all, op=nl.multiply)

                h = nisa.tensor_tensor_scan(dA, dBu, initial=0.0, op0=nl.multiply, op1=nl.add)

                c_row = nl.load(C[b, s:s + 1, 0:seq])
                c_all = nl.broadcast_to(c_row, shape=(P, seq))
                y = nisa.tensor_tensor(h, c_all, op=nl.multiply)
                y_acc[:, ct, :] += y

        for ct in nl.affine_range(n_ct):
            nl.store(out[b, ct * P:(ct + 1) * P, 0:seq], value=y_acc[:, ct, :])
    return out
