"""Less common nki.isa instructions (toolchain/sim/ops/isa_extra.py) against NumPy references and constraints."""

from __future__ import annotations

import numpy as np
import pytest
from nki_agent.toolchain.facts.errors import NkiError
from nki_agent.toolchain.shim import installed

with installed():
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl
    import nki as nnki
    import nki.isa as nnisa
    import nki.language as nnl
    from neuronxcc import nki

FMIN = float(np.finfo(np.float32).min)
RNG = np.random.default_rng(1)


def rand(*shape: int) -> np.ndarray:
    return RNG.random(shape, dtype=np.float32)


def raises(code: str, fn, *args):
    with pytest.raises(NkiError) as e:
        fn(*args)
    assert e.value.code == code, e.value.message
    return e.value


# --------------------------------------------------------------------------- tensor_tensor_scan
@nki.jit
def c_scan(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    r = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    r[:, 0:8] = nisa.tensor_tensor_scan(x[:, 0:8], y[:, 0:8], initial=0, op0=np.multiply, op1=np.add)
    r[:, 8:16] = nisa.tensor_tensor_scan(x[:, 8:16], y[:, 8:16], initial=r[:, 7], op0=np.multiply, op1=np.add)
    nl.store(out, r)
    return out


@nnki.jit
def n_scan(a, b, init):
    out = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.shared_hbm)
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    y = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    i0 = nnl.ndarray((a.shape[0], 1), dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    nnisa.dma_copy(dst=y, src=b)
    nnisa.dma_copy(dst=i0, src=init)
    r = nnl.ndarray(a.shape, dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.tensor_tensor_scan(r, x, y, i0, nnl.subtract, nnl.add, reverse0=True)
    nnisa.dma_copy(dst=out, src=r)
    return out


def test_tensor_tensor_scan() -> None:
    a, b = rand(8, 16), rand(8, 16)
    ref = np.zeros_like(a)
    prev = np.zeros(8, np.float32)
    for i in range(16):
        prev = ref[:, i] = a[:, i] * prev + b[:, i]
    np.testing.assert_allclose(c_scan(a, b), ref, rtol=1e-5)
    init = rand(8, 1)
    ref2, prev = np.zeros_like(a), init[:, 0]
    for i in range(16):
        prev = ref2[:, i] = (prev - a[:, i]) + b[:, i]  # reverse0: op0(prev, data0)
    np.testing.assert_allclose(n_scan(a, b, init), ref2, rtol=1e-5)


@nki.jit
def c_scan_bad_part(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b[0:4])
    nl.store(out, nisa.tensor_tensor_scan(x, y, initial=0, op0=np.multiply, op1=np.add))
    return out


def test_tensor_tensor_scan_partition_mismatch() -> None:
    raises("err_num_partition_mismatch", c_scan_bad_part, rand(8, 4), rand(8, 4))


# ---------------------------------------------------------------------- tensor_scalar_cumulative
@nnki.jit
def n_cumulative(a, op1, chain):
    out = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.shared_hbm)
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    r = nnl.ndarray(a.shape, dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.tensor_scalar_cumulative(dst=r, src=x, op0=nnl.multiply, op1=op1, imm0=2.0)
    if chain:
        nnisa.tensor_scalar_cumulative(dst=r, src=x, op0=nnl.multiply, op1=op1, imm0=2.0,
                                       reduce_cmd=nnisa.reduce_cmd.reduce)
    nnisa.dma_copy(dst=out, src=r)
    return out


@nnki.jit
def n_cumulative_load(a, init):
    out = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.shared_hbm)
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    i1 = nnl.ndarray((a.shape[0], 1), dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    nnisa.dma_copy(dst=i1, src=init)
    nnisa.tensor_scalar_cumulative(dst=x, src=x, op0=nnl.add, op1=nnl.maximum, imm0=0.0, imm1=i1,
                                   reduce_cmd=nnisa.reduce_cmd.load_reduce)
    nnisa.dma_copy(dst=out, src=x)
    return out


@nnki.jit
def n_cumulative_reduce_first(a):
    out = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.shared_hbm)
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    nnisa.tensor_scalar_cumulative(dst=x, src=x, op0=nnl.add, op1=nnl.add, imm0=0.0,
                                   reduce_cmd=nnisa.reduce_cmd.reduce)
    nnisa.dma_copy(dst=out, src=x)
    return out


def test_tensor_scalar_cumulative() -> None:
    a = rand(16, 32)
    np.testing.assert_allclose(n_cumulative(a, nnl.add, False), np.cumsum(2 * a, axis=1), rtol=1e-5)
    chained = np.cumsum(np.concatenate([2 * a, 2 * a], axis=1), axis=1)[:, 32:]
    np.testing.assert_allclose(n_cumulative(a, nnl.add, True), chained, rtol=1e-5)
    np.testing.assert_allclose(n_cumulative(a, nnl.minimum, False), np.minimum.accumulate(2 * a, axis=1))
    init = rand(16, 1)
    ref = np.maximum.accumulate(np.concatenate([init, a], axis=1), axis=1)[:, 1:]
    np.testing.assert_allclose(n_cumulative_load(a, init), ref)


def test_tensor_scalar_cumulative_errors() -> None:
    raises("sim_invalid_argument", n_cumulative_reduce_first, rand(4, 8))  # accumulator never initialised
    raises("sim_invalid_argument", n_cumulative, rand(4, 8), nnl.divide, False)  # op1 not a reduce op
    raises("sim_unsupported_dtype", n_cumulative, np.ones((4, 8), np.int32), nnl.add, False)


# ----------------------------------------------------------------------------- select_reduce
@nki.jit
def c_select(pred, a, f):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    red = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    dst = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    rr = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.select_reduce(dst=dst, predicate=nl.load(pred), on_true=nl.load(a), on_false=nl.load(f),
                       reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_res=rr, reduce_op=nl.max)
    nl.store(out, dst)
    nl.store(red, rr)
    return out, red


@nnki.jit
def n_select(pred, a):
    out = nnl.ndarray(a.shape, dtype=nnl.float32, buffer=nnl.shared_hbm)
    p = nnl.ndarray(pred.shape, dtype=pred.dtype, buffer=nnl.sbuf)
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=p, src=pred)
    nnisa.dma_copy(dst=x, src=a)
    dst = nnl.ndarray(a.shape, dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.select_reduce(dst, p, x, -1.0, reverse_pred=True)
    nnisa.dma_copy(dst=out, src=dst)
    return out


def test_select_reduce() -> None:
    pred = (RNG.random((8, 16)) > 0.5).astype(np.uint8)
    a, f = rand(8, 16), rand(8, 1)
    out, red = c_select(pred, a, f)
    ref = np.where(pred != 0, a, f)
    np.testing.assert_allclose(out, ref)
    np.testing.assert_allclose(red, ref.max(axis=1, keepdims=True))
    np.testing.assert_allclose(n_select(pred, a), np.where(pred == 0, a, -1.0))


def test_select_reduce_predicate_dtype() -> None:
    raises("sim_unsupported_dtype", n_select, np.ones((4, 8), np.float32), rand(4, 8))


# ------------------------------------------------------------------------------ range_select
@nki.jit(platform_target="trn2")
def c_range(a, b0, b1):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    red = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    x, lo, hi = nl.load(a), nl.load(b0), nl.load(b1)
    rr = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    r = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    r[...] = nisa.range_select(on_true_tile=x, comp_op0=np.greater_equal, comp_op1=np.less, bound0=lo, bound1=hi,
                               reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_op=np.max, range_start=0,
                               on_false_value=FMIN)
    # chained call: the accumulators continue across calls; only the last one reads them out
    nisa.range_select(on_true_tile=x, comp_op0=np.greater_equal, comp_op1=np.less, bound0=lo, bound1=hi,
                      reduce_cmd=nisa.reduce_cmd.reduce, reduce_res=rr, reduce_op=np.max,
                      range_start=a.shape[1], on_false_value=FMIN)
    nl.store(out, r)
    nl.store(red, rr)
    return out, red


@nki.jit
def c_range_trn1(a, b0, b1):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nisa.range_select(on_true_tile=nl.load(a), comp_op0=np.greater_equal, comp_op1=np.less,
                                    bound0=nl.load(b0), bound1=nl.load(b1)))
    return out


@nnki.jit
def n_range(a, b0, b1, fill):
    out = nnl.ndarray(a.shape, dtype=nnl.float32, buffer=nnl.shared_hbm)
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    lo = nnl.ndarray(b0.shape, dtype=nnl.float32, buffer=nnl.sbuf)
    hi = nnl.ndarray(b1.shape, dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    nnisa.dma_copy(dst=lo, src=b0)
    nnisa.dma_copy(dst=hi, src=b1)
    r = nnl.ndarray(a.shape, dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.range_select(r, x, nnl.greater, nnl.less_equal, lo, hi, range_start=4, on_false_value=fill)
    nnisa.dma_copy(dst=out, src=r)
    return out


def test_range_select() -> None:
    a = rand(8, 16)
    b0 = RNG.integers(0, 8, (8, 1)).astype(np.float32)
    b1 = b0 + RNG.integers(1, 20, (8, 1)).astype(np.float32)
    idx = np.arange(16)[None, :]
    keep = (idx >= b0) & (idx < b1)
    out, red = c_range(a, b0, b1)
    np.testing.assert_allclose(out, np.where(keep, a, FMIN))
    keep2 = (idx + 16 >= b0) & (idx + 16 < b1)
    ref_max = np.maximum(np.where(keep, a, FMIN).max(1), np.where(keep2, a, FMIN).max(1))[:, None]
    np.testing.assert_allclose(red, ref_max)
    keep3 = (idx + 4 > b0) & (idx + 4 <= b1)
    np.testing.assert_allclose(n_range(a, b0, b1, FMIN), np.where(keep3, a, FMIN))


def test_range_select_constraints() -> None:
    a, b = rand(4, 8), np.zeros((4, 1), np.float32)
    raises("sim_invalid_argument", c_range_trn1, a, b, b)  # NeuronCore-v3+ only
    raises("sim_invalid_argument", n_range, a, b, b, 0.0)  # on_false_value must be FP32_MIN


# -------------------------------------------------------------------- tensor_copy_predicated
@nki.jit
def c_copy_pred(pred, a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    dst = nl.load(b)
    nisa.tensor_copy_predicated(src=nl.load(a), dst=dst, predicate=nl.load(pred))
    nl.store(out, dst)
    return out


@nnki.jit
def n_copy_pred(pred, b):
    out = nnl.ndarray(b.shape, dtype=b.dtype, buffer=nnl.shared_hbm)
    p = nnl.ndarray(pred.shape, dtype=pred.dtype, buffer=nnl.sbuf)
    dst = nnl.ndarray(b.shape, dtype=b.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=p, src=pred)
    nnisa.dma_copy(dst=dst, src=b)
    nnisa.tensor_copy_predicated(dst, 7.0, p, reverse_pred=True)
    nnisa.dma_copy(dst=out, src=dst)
    return out


@nki.jit
def c_copy_pred_dtype(pred, a, b):
    out = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.shared_hbm)
    dst = nl.load(b)
    nisa.tensor_copy_predicated(src=nl.load(a, dtype=nl.bfloat16), dst=dst, predicate=nl.load(pred))
    nl.store(out, dst)
    return out


def test_tensor_copy_predicated() -> None:
    a, b = rand(8, 32), rand(8, 32)
    pred = a <= 0.5
    np.testing.assert_allclose(c_copy_pred(pred, a, b), np.where(pred, a, b))
    pu = pred.astype(np.uint16)
    np.testing.assert_allclose(n_copy_pred(pu, b), np.where(pu == 0, 7.0, b))
    raises("sim_unsupported_dtype", c_copy_pred_dtype, pu, a, b)  # src and dst dtypes differ
    raises("sim_unsupported_dtype", n_copy_pred, pred.astype(np.int16), b)  # predicate dtype


# ----------------------------------------------------------------------------- nc_stream_shuffle
@nki.jit
def c_shuffle(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    mask = [(i - 1) % 32 for i in range(32)]
    mask[5] = 255
    nisa.nc_stream_shuffle(x, x, mask)  # in place, classic order (src, dst, shuffle_mask)
    nl.store(out, x)
    return out


@nnki.jit
def n_shuffle_broadcast(a):
    out = nnl.ndarray((32, a.shape[1]), dtype=a.dtype, buffer=nnl.shared_hbm)
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    y = nnl.ndarray((32, a.shape[1]), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.nc_stream_shuffle(y, x[0:1, :], [0] * 32)
    nnisa.dma_copy(dst=out, src=y)
    return out


@nnki.jit
def n_shuffle_bad_start(a):
    out = nnl.ndarray((48, a.shape[1]), dtype=a.dtype, buffer=nnl.shared_hbm)
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    nnisa.nc_stream_shuffle(x[16:64, :], x[16:64, :], list(range(32)))
    nnisa.dma_copy(dst=out, src=x[16:64, :])
    return out


def test_nc_stream_shuffle() -> None:
    a = rand(64, 8)
    ref = a.copy()
    for q in range(2):
        for i in range(32):
            if i != 5:
                ref[q * 32 + i] = a[q * 32 + (i - 1) % 32]
    np.testing.assert_allclose(c_shuffle(a), ref)
    np.testing.assert_allclose(n_shuffle_broadcast(a), np.broadcast_to(a[0], (32, 8)))
    raises("sim_invalid_argument", n_shuffle_bad_start, a)  # 64 active partitions must start at 0 or 64


# ------------------------------------------------------------------------------- local_gather
@nki.jit
def c_local_gather(src, index, k, nvalid):
    out = nl.ndarray((src.shape[0], nvalid * k), dtype=src.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.local_gather(nl.load(src), nl.load(index), k, nvalid))
    return out


@nnki.jit
def n_local_gather(src, index):
    out = nnl.ndarray((src.shape[0], 16 * index.shape[1]), dtype=src.dtype, buffer=nnl.shared_hbm)
    s = nnl.ndarray(src.shape, dtype=src.dtype, buffer=nnl.sbuf)
    i = nnl.ndarray(index.shape, dtype=index.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=s, src=src)
    nnisa.dma_copy(dst=i, src=index)
    d = nnl.ndarray((src.shape[0], 16 * index.shape[1]), dtype=src.dtype, buffer=nnl.sbuf)
    nnisa.local_gather(d, s, i)
    nnisa.dma_copy(dst=out, src=d)
    return out


def local_gather_ref(src, index, k, nvalid):
    flat = src.reshape(src.shape[0], -1)
    out = np.empty((src.shape[0], nvalid, k), src.dtype)
    for core in range(src.shape[0] // 16):
        rows = slice(core * 16, core * 16 + 16)
        i1d = index[rows].flatten(order="F")[:nvalid].astype(np.int64)
        for e in range(k):
            out[rows, :, e] = flat[rows][:, i1d + e]
    return out.reshape(src.shape[0], -1)


def test_local_gather() -> None:
    src = rand(32, 64, 4)
    per_core = RNG.integers(0, 64, (16, 2)).astype(np.uint16)
    index = np.tile(per_core, (2, 1)) * 4
    np.testing.assert_allclose(c_local_gather(src, index, 4, 20), local_gather_ref(src, index, 4, 20))
    src2 = rand(16, 40)
    idx2 = RNG.integers(0, 40, (16, 3)).astype(np.uint16)
    np.testing.assert_allclose(n_local_gather(src2, idx2), local_gather_ref(src2, idx2, 1, 48))
    raises("sim_invalid_argument", c_local_gather, src, index, 3, 20)  # num_elem_per_idx
    raises("sim_unsupported_dtype", n_local_gather, src2, idx2.astype(np.int32))  # index must be uint16
    raises("sim_invalid_argument", n_local_gather, rand(8, 40), idx2[0:8])  # P multiple of 16


# ------------------------------------------------------------------------------- nc_n_gather
@nnki.jit
def n_gather(data, indices, out_dtype):
    out = nnl.ndarray(indices.shape, dtype=data.dtype, buffer=nnl.shared_hbm)
    x = nnl.ndarray(data.shape, dtype=data.dtype, buffer=nnl.sbuf)
    ix = nnl.ndarray(indices.shape, dtype=indices.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=data)
    nnisa.dma_copy(dst=ix, src=indices)
    d = nnl.ndarray(indices.shape, dtype=out_dtype, buffer=nnl.sbuf)
    nnisa.nc_n_gather(d, x, ix)
    nnisa.dma_copy(dst=out, src=d)
    return out


def test_nc_n_gather() -> None:
    data = rand(8, 4, 16)
    ind = RNG.integers(0, 64, (8, 10)).astype(np.uint32)
    ref = np.take_along_axis(data.reshape(8, -1), ind.astype(np.int64), axis=1)
    np.testing.assert_allclose(n_gather(data, ind, nnl.float32), ref)
    raises("sim_unsupported_dtype", n_gather, data, ind, nnl.bfloat16)  # dst dtype must equal data dtype
    raises("sim_invalid_argument", n_gather, data, ind + 64, nnl.float32)  # index out of range


# ------------------------------------------------------------------------------------- dropout
@nki.jit
def c_dropout(a, prob):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.dropout(nl.load(a), prob=prob))
    return out


@nnki.jit
def n_dropout(a, prob):
    out = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.shared_hbm)
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    p = nnl.ndarray(prob.shape, dtype=prob.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    nnisa.dma_copy(dst=p, src=prob)
    nnisa.dropout(x, x, p)
    nnisa.dma_copy(dst=out, src=x)
    return out


def test_dropout() -> None:
    a = rand(64, 256) + 1.0
    for p in (0.0, 1.0):
        np.testing.assert_array_equal(c_dropout(a, p), a if p == 0 else np.zeros_like(a))
    r = c_dropout(a, 0.25)
    assert np.all((r == 0) | (r == a)) and 0.2 < np.mean(r == 0) < 0.3
    prob = np.zeros((64, 1), np.float32)
    prob[32:] = 1.0
    r2 = n_dropout(a, prob)
    np.testing.assert_array_equal(r2[:32], a[:32])
    assert np.all(r2[32:] == 0)
    np.testing.assert_array_equal(c_dropout(a, 1.5), np.zeros_like(a))  # saturates (docs/toolchain.md)
    np.testing.assert_array_equal(c_dropout(a, -0.5), a)
    raises("sim_unsupported_dtype", n_dropout, np.ones((4, 8), np.int32), np.zeros((4, 1), np.float16))


# ------------------------------------------------------------------------------- dma_transpose
@nki.jit
def c_dma_t(a):
    out = nl.ndarray(a.shape[::-1], dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.dma_transpose(a))
    return out


@nnki.jit
def n_dma_t(a, axes):
    T, d1, d2, d3 = a.shape
    out = nnl.ndarray((d3, d1, d2, T), dtype=a.dtype, buffer=nnl.shared_hbm)
    t = nnl.ndarray((d3, d1, d2, T), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_transpose(dst=t, src=a, axes=axes)
    nnisa.dma_copy(dst=out, src=t)
    return out


@nnki.jit
def n_dma_t_hw(a):
    out = nnl.ndarray(a.shape[::-1], dtype=a.dtype, buffer=nnl.shared_hbm)
    t = nnl.ndarray(a.shape[::-1], dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_transpose(dst=t, src=a, dge_mode=nnisa.dge_mode.hwdge)
    nnisa.dma_copy(dst=out, src=t)
    return out


def test_dma_transpose() -> None:
    a = rand(24, 40)
    np.testing.assert_array_equal(c_dma_t(a), a.T)
    b = rand(3, 2, 5, 6)
    np.testing.assert_array_equal(n_dma_t(b, (3, 1, 2, 0)), np.transpose(b, (3, 1, 2, 0)))
    h = rand(16, 64).astype(np.float16)
    np.testing.assert_array_equal(n_dma_t_hw(h), h.T)
    raises("sim_invalid_argument", n_dma_t, b, (3, 2, 1, 0))  # unsupported permutation
    raises("sim_invalid_argument", n_dma_t_hw, rand(16, 64))  # hardware DGE needs a 2-byte dtype
    raises("err_num_partition_exceed_arch_limit", c_dma_t, rand(4, 200))


# ------------------------------------------------------------------ max8 / find_index8 / match_replace8
@nki.jit
def c_top8(a):
    vals = nl.ndarray((a.shape[0], 8), dtype=a.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray((a.shape[0], 8), dtype=nl.uint32, buffer=nl.shared_hbm)
    rep = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ridx = nl.ndarray((a.shape[0], 8), dtype=nl.uint32, buffer=nl.shared_hbm)
    x = nl.load(a)
    m = nisa.max8(src=x)
    nl.store(vals, m)
    nl.store(idx, nisa.nc_find_index8(data=x, vals=m))
    di = nl.ndarray((a.shape[0], 8), dtype=nl.uint32, buffer=nl.sbuf)
    nl.store(rep, nisa.nc_match_replace8(data=x, vals=m, imm=-1.0, dst_idx=di))
    nl.store(ridx, di)
    return vals, idx, rep, ridx


@nnki.jit
def n_top8(a, vals_in):
    idx = nnl.ndarray((a.shape[0], 8), dtype=nnl.uint32, buffer=nnl.shared_hbm)
    rep = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.shared_hbm)
    ridx = nnl.ndarray((a.shape[0], 8), dtype=nnl.uint32, buffer=nnl.shared_hbm)
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    v = nnl.ndarray((a.shape[0], 8), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    nnisa.dma_copy(dst=v, src=vals_in)
    i = nnl.ndarray((a.shape[0], 8), dtype=nnl.uint32, buffer=nnl.sbuf)
    nnisa.nc_find_index8(i, x, v)
    nnisa.dma_copy(dst=idx, src=i)
    r = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    di = nnl.ndarray((a.shape[0], 8), dtype=nnl.uint32, buffer=nnl.sbuf)
    nnisa.nc_match_replace8(r, x, v, 0.0, dst_idx=di)
    nnisa.dma_copy(dst=rep, src=r)
    nnisa.dma_copy(dst=ridx, src=di)
    return idx, rep, ridx


@nnki.jit
def n_max8(a):
    out = nnl.ndarray((a.shape[0], 8), dtype=a.dtype, buffer=nnl.shared_hbm)
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    m = nnl.ndarray((a.shape[0], 8), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.max8(m, x)
    nnisa.dma_copy(dst=out, src=m)
    return out


def test_max8_find_index8_match_replace8_classic() -> None:
    a = rand(16, 4, 10)
    vals, idx, rep, ridx = c_top8(a)
    flat = a.reshape(16, -1)
    order = np.argsort(-flat, axis=1)[:, :8]
    np.testing.assert_allclose(vals, np.take_along_axis(flat, order, axis=1))
    np.testing.assert_array_equal(idx, order)
    np.testing.assert_array_equal(ridx, order)
    ref = flat.copy()
    np.put_along_axis(ref, order, -1.0, axis=1)
    np.testing.assert_allclose(rep, ref.reshape(a.shape))


def test_find_index8_match_replace8_duplicates_new() -> None:
    data = np.array([[1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8]], np.float32)
    vals = np.array([[3, 8, 8, 8, 8, 8, 8, 8]], np.float32)
    idx, rep, ridx = n_top8(data, vals)
    np.testing.assert_array_equal(idx, [[2, 4, 5, 6, 7, 8, 9, 10]])  # duplicates pair ascending
    np.testing.assert_array_equal(ridx, [[2, 10, 9, 8, 7, 6, 5, 4]])  # sdk 2.32 docstring example
    np.testing.assert_array_equal(rep, [[1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0]])
    vals2 = vals.copy()
    vals2[0, 0] = 99.0  # not present: all-ones sentinel
    idx2, _, _ = n_top8(data, vals2)
    assert idx2[0, 0] == 0xFFFFFFFF


def test_max8_errors() -> None:
    np.testing.assert_allclose(n_max8(rand(4, 8) * 0 + 1), np.ones((4, 8)))
    raises("err_size_of_dimension_exceed_arch_limit", n_max8, rand(4, 7))


# --------------------------------------------------------------------- tensor_partition_reduce
@nki.jit
def c_part_reduce(a, op):
    out = nl.ndarray((1,) + a.shape[1:], dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.tensor_partition_reduce(op, nl.load(a)))
    return out


@nnki.jit
def n_part_reduce(a, op):
    out = nnl.ndarray((1, a.shape[1]), dtype=a.dtype, buffer=nnl.shared_hbm)
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    r = nnl.ndarray((1, a.shape[1]), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.tensor_partition_reduce(r, op, x)
    nnisa.dma_copy(dst=out, src=r)
    return out


def test_tensor_partition_reduce() -> None:
    a = rand(32, 8, 4)
    np.testing.assert_allclose(c_part_reduce(a, np.add), a.sum(axis=0, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(c_part_reduce(a, nl.maximum), a.max(axis=0, keepdims=True))
    ints = RNG.integers(0, 1 << 20, (16, 8)).astype(np.int32)
    np.testing.assert_array_equal(n_part_reduce(ints, nnl.bitwise_or), np.bitwise_or.reduce(ints, axis=0)[None])
    raises("sim_unsupported_dtype", n_part_reduce, rand(16, 8), nnl.bitwise_or)
    raises("sim_invalid_argument", n_part_reduce, rand(16, 8), nnl.multiply)


# ------------------------------------------------------------------------ tensor_scalar_reduce
@nki.jit
def c_ts_reduce(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    red = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    rr = nl.ndarray((a.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nl.store(out, nisa.tensor_scalar_reduce(data=nl.load(a), op0=np.multiply, operand0=3.0, reduce_op=np.add,
                                            reduce_res=rr))
    nl.store(red, rr)
    return out, red


@nnki.jit
def n_ts_reduce(a, off):
    out = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.shared_hbm)
    red = nnl.ndarray((a.shape[0], 1), dtype=nnl.float32, buffer=nnl.shared_hbm)
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    o = nnl.ndarray(off.shape, dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    nnisa.dma_copy(dst=o, src=off)
    r = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    rr = nnl.ndarray((a.shape[0], 1), dtype=nnl.float32, buffer=nnl.sbuf)
    half = a.shape[1] // 2
    nnisa.tensor_scalar_reduce(r[:, 0:half], x[:, 0:half], nnl.subtract, o, nnl.maximum)
    nnisa.tensor_scalar_reduce(r[:, half:], x[:, half:], nnl.subtract, o, nnl.maximum, reduce_res=rr,
                               reduce_cmd=nnisa.reduce_cmd.reduce, reduce_res_negate=True)
    nnisa.dma_copy(dst=out, src=r)
    nnisa.dma_copy(dst=red, src=rr)
    return out, red


@nnki.jit
def n_ts_reduce_bitvec(a):
    out = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.shared_hbm)
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    rr = nnl.ndarray((a.shape[0], 1), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.tensor_scalar_reduce(x, x, nnl.bitwise_and, 3, nnl.add, reduce_res=rr)
    nnisa.dma_copy(dst=out, src=x)
    return out


def test_tensor_scalar_reduce() -> None:
    a = rand(8, 12)
    out, red = c_ts_reduce(a)
    np.testing.assert_allclose(out, 3 * a, rtol=1e-6)
    np.testing.assert_allclose(red, (3 * a).sum(1, keepdims=True), rtol=1e-5)
    off = rand(8, 1)
    out2, red2 = n_ts_reduce(a, off)
    np.testing.assert_allclose(out2, a - off, rtol=1e-6)
    np.testing.assert_allclose(red2, -(a - off).max(1, keepdims=True), rtol=1e-6)
    raises("sim_invalid_argument", n_ts_reduce_bitvec, np.ones((4, 8), np.int32))


# --------------------------------------------------------------------------------- exponential
@nnki.jit
def n_exp(a, mx):
    out = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.shared_hbm)
    red = nnl.ndarray((a.shape[0], 1), dtype=nnl.float32, buffer=nnl.shared_hbm)
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    m = nnl.ndarray(mx.shape, dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    nnisa.dma_copy(dst=m, src=mx)
    e = nnl.ndarray(a.shape, dtype=nnl.bfloat16, buffer=nnl.sbuf)
    rr = nnl.ndarray((a.shape[0], 1), dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.exponential(e, x, max_value=m, reduce_res=rr, reduce_cmd=nnisa.reduce_cmd.load_reduce, reduce_init=1.0)
    nnisa.tensor_copy(dst=x, src=e)
    nnisa.dma_copy(dst=out, src=x)
    nnisa.dma_copy(dst=red, src=rr)
    return out, red


@nnki.jit
def n_exp_bad_init(a):
    out = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.shared_hbm)
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    nnisa.exponential(x, x, reduce_cmd=nnisa.reduce_cmd.reset_reduce, reduce_init=2.0)
    nnisa.dma_copy(dst=out, src=x)
    return out


def test_exponential() -> None:
    a, mx = rand(8, 16), rand(8, 1)
    out, red = n_exp(a, mx)
    ref = np.exp(a - mx)
    np.testing.assert_allclose(out, ref, rtol=1e-2)  # dst is bf16
    np.testing.assert_allclose(red, 1.0 + ref.sum(1, keepdims=True), rtol=1e-5)
    raises("sim_invalid_argument", n_exp_bad_init, a)


# ------------------------------------------------------------- new-API calls need their dst first
def test_new_api_needs_dst() -> None:
    @nnki.jit
    def k(a):
        out = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.shared_hbm)
        x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
        nnisa.dma_copy(dst=x, src=a)
        nnisa.max8(x)
        return out

    raises("sim_invalid_argument", k, rand(4, 8))
