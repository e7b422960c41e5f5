"""Properties of the estimate: more work never costs less, double buffering never loses to its serial
form, sequential_range never beats affine_range, DMA-bound time is linear in bytes once large."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nki_agent.toolchain.cost import estimate
from nki_agent.toolchain.sim.trace import Access, Trace
from trace_builders import TB, matmul_tiled

OPS = ("exp", "copy", "add", "sum", "scale")
SETTINGS = settings(max_examples=40, deadline=None)


def pipeline(trips: int, free: int, dtype: str, ops: tuple[str, ...], kind: str = "affine", fresh: bool = True,
             target: str = "trn1", extra: tuple[str, ...] = ()) -> Trace:
    """Per iteration: load a [128, free] tile, run ``ops`` on it (each reading the previous result), store.
    ``fresh``: new tiles every iteration (what multi-buffering allocates); else one set reused."""
    tb = TB(target)
    src = tb.hbm(128 * trips, free, dtype)
    dst = tb.hbm(128 * trips, free, dtype)
    shared = [tb.sbuf(128, free, dtype) for _ in range(len(ops) + 1)]
    col = tb.sbuf(128, 1, "float32")
    for i in tb.loop(kind, trips):
        tiles = [tb.sbuf(128, free, dtype) for _ in range(len(ops) + 1)] if fresh else shared
        tb.load(tiles[0].all(), src.view(i * 128, (i + 1) * 128), line=20)
        for k, op in enumerate(ops):
            a, b = tiles[k].all(), tiles[k + 1].all()
            if op == "exp":
                tb.op("nisa.activation", b, a, ops=("exp",), line=21)
            elif op == "copy":
                tb.op("nisa.tensor_copy", b, a, line=22)
            elif op == "add":
                tb.op("nisa.tensor_tensor", b, a, a, ops=("add",), line=23)
            elif op == "sum":
                tb.op("nisa.tensor_reduce", col.all(), a, ops=("add",), line=24)
                tb.op("nisa.tensor_scalar", b, a, col.all(), ops=("subtract",), line=25)
            else:
                tb.op("nisa.tensor_scalar", b, a, ops=("multiply",), line=26)
        tb.store(dst.view(i * 128, (i + 1) * 128), tiles[-1].all(), line=27)
    for op in extra:  # work appended after the loop
        t = tb.sbuf(128, free, dtype)
        tb.op("nisa.activation" if op == "exp" else "nisa.tensor_copy", t.all(), tb.sbuf(128, free, dtype).all(),
              ops=(op,), line=30)
    return tb.trace


def latency(tr: Trace) -> float:
    return estimate(tr).latency_us


trips_s = st.integers(1, 10)
free_s = st.sampled_from([32, 128, 512, 1024, 2048, 4096])
dtype_s = st.sampled_from(["bfloat16", "float32"])
ops_s = st.lists(st.sampled_from(OPS), min_size=0, max_size=4).map(tuple)
target_s = st.sampled_from(["trn1", "trn2", "trn3"])


@SETTINGS
@given(trips_s, free_s, dtype_s, ops_s, target_s, st.lists(st.sampled_from(["exp", "copy"]), min_size=1, max_size=3))
def test_more_instructions_never_cost_less(trips: int, free: int, dtype: str, ops: tuple[str, ...], target: str,
                                           extra: list[str]) -> None:
    base = latency(pipeline(trips, free, dtype, ops, target=target))
    assert latency(pipeline(trips, free, dtype, ops, target=target, extra=tuple(extra))) >= base - 1e-9
    assert latency(pipeline(trips + 1, free, dtype, ops, target=target)) >= base - 1e-9
    assert latency(pipeline(trips, free, dtype, ops + ("exp",), target=target)) >= base - 1e-9


@SETTINGS
@given(trips_s, st.integers(0, 4), st.integers(1, 3), dtype_s, ops_s, target_s)
def test_larger_shapes_never_cost_less(trips: int, f_small: int, grow: int, dtype: str, ops: tuple[str, ...],
                                       target: str) -> None:
    sizes = [32, 128, 512, 1024, 2048, 4096, 8192, 16384]
    small, big = sizes[f_small], sizes[f_small + grow]
    assert latency(pipeline(trips, big, dtype, ops, target=target)) >= latency(
        pipeline(trips, small, dtype, ops, target=target)) - 1e-9


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 6), st.integers(0, 3))
def test_more_matmul_tiles_never_cost_less(m: int, n: int, k: int, more: int) -> None:
    base = latency(matmul_tiled(m, n, k))
    assert latency(matmul_tiled(m, n, k + more)) >= base - 1e-9
    assert latency(matmul_tiled(m + more, n, k)) >= base - 1e-9


@SETTINGS
@given(st.integers(2, 10), free_s, dtype_s, ops_s, target_s)
def test_double_buffering_is_never_slower_than_its_serial_forms(trips: int, free: int, dtype: str,
                                                                ops: tuple[str, ...], target: str) -> None:
    pipelined = latency(pipeline(trips, free, dtype, ops, "affine", fresh=True, target=target))
    single_buffer = latency(pipeline(trips, free, dtype, ops, "affine", fresh=False, target=target))
    serial = latency(pipeline(trips, free, dtype, ops, "sequential", fresh=True, target=target))
    assert pipelined <= single_buffer + 1e-9
    assert pipelined <= serial + 1e-9


@SETTINGS
@given(st.integers(1, 10), free_s, dtype_s, ops_s, st.booleans(), target_s)
def test_sequential_range_is_never_faster_than_affine_range(trips: int, free: int, dtype: str,
                                                             ops: tuple[str, ...], fresh: bool, target: str) -> None:
    affine = latency(pipeline(trips, free, dtype, ops, "affine", fresh, target))
    sequential = latency(pipeline(trips, free, dtype, ops, "sequential", fresh, target))
    assert sequential >= affine - 1e-9


@settings(max_examples=10, deadline=None)
@given(st.sampled_from([1024, 2048, 4096, 16384]), st.integers(2, 4), target_s)
def test_a_dma_bound_kernel_is_linear_in_bytes_once_large(row_bytes: int, factor: int, target: str) -> None:
    def copy_kernel(trips: int) -> Trace:
        tb = TB(target)
        cols = row_bytes // 4
        src, dst = tb.hbm(128 * trips, cols, "float32"), tb.hbm(128 * trips, cols, "float32")
        for i in tb.loop("affine", trips):
            t = tb.sbuf(128, cols, "float32")
            tb.load(t.all(), src.view(i * 128, (i + 1) * 128))
            tb.store(dst.view(i * 128, (i + 1) * 128), t.all())
        return tb.trace

    trips = max(64, (64 << 20) // (128 * row_bytes))  # >= 64 MiB each way: far past the fixed latencies
    one = estimate(copy_kernel(trips))
    more = estimate(copy_kernel(trips * factor))
    assert one.bound == "DMA" and more.bound == "DMA"
    t1, t2 = one.latency_us - one.overhead_us, more.latency_us - more.overhead_us
    assert abs(t2 / t1 - factor) / factor < 0.05


def _access(draw: st.DrawFn, storages: list[tuple[int, str, int, int]]) -> Access:
    serial, buffer, rows, cols = draw(st.sampled_from(storages))
    r0 = draw(st.integers(0, rows - 1))
    r1 = draw(st.integers(r0, rows))
    c0 = draw(st.integers(0, cols - 1))
    c1 = draw(st.integers(c0, cols))
    item = 4
    n_rows, n_cols = r1 - r0, c1 - c0
    lo = (r0 * cols + c0) * item
    hi = max(lo, ((r1 - 1) * cols + c1) * item) if n_rows else lo
    nbytes = n_rows * n_cols * item
    run = nbytes if (n_cols == cols or n_rows <= 1) else n_cols * item
    return Access(serial, buffer, (n_rows, n_cols), "float32", nbytes, n_rows, lo, hi, run)


APIS = ["nl.load", "nl.store", "nisa.nc_matmul", "nisa.activation", "nisa.tensor_tensor", "nisa.tensor_copy",
        "nisa.iota", "nl.zeros", "assign", "accumulate", "op.add", "nisa.bn_stats", "nisa.mystery"]


@st.composite
def random_trace(draw: st.DrawFn) -> Trace:
    storages = [(k + 1, draw(st.sampled_from(["hbm", "sbuf", "psum"])), draw(st.integers(1, 128)),
                 draw(st.integers(1, 64))) for k in range(draw(st.integers(1, 6)))]
    tb = TB(draw(target_s))
    kinds = ["affine", "sequential", "static", "range"]
    for _ in range(draw(st.integers(0, 3))):  # a few loops around a few instructions each
        for _it in tb.loop(draw(st.sampled_from(kinds)), draw(st.integers(1, 3)), line=draw(st.integers(1, 9))):
            for _k in range(draw(st.integers(0, 4))):
                reads = [_access(draw, storages) for _ in range(draw(st.integers(0, 2)))]
                writes = [_access(draw, storages) for _ in range(draw(st.integers(0, 2)))]
                tb.instance = draw(st.integers(tb.instance, tb.instance + 1))
                tb.instr(draw(st.sampled_from(APIS)), reads, writes)
    return tb.trace


@settings(max_examples=200, deadline=None)
@given(random_trace(), st.booleans())
def test_estimate_never_fails_and_keeps_its_invariants(tr: Trace, timeline: bool) -> None:
    est = estimate(tr, timeline=timeline)
    assert est.latency_us >= est.overhead_us > 0
    assert est.critical_path_us == pytest.approx(est.latency_us - est.overhead_us, abs=1e-9)
    assert sum(lc.share for lc in est.lines) <= 1.0 + 1e-9
    assert all(0 <= lc.share <= 1 for lc in est.loops)
    assert all(0 <= e.utilisation <= 1 for e in est.engines)
    assert est.instructions == len(tr.instrs)
