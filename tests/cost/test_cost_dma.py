"""DMA time vs bytes and descriptor row size, the per-core bandwidth ceiling, spills."""

from __future__ import annotations

import pytest
from nki_agent.toolchain.cost import estimate
from nki_agent.toolchain.cost.dma import (
    DmaShape,
    FluidPool,
    dma_shape,
    efficiency,
    engines_used,
    spill,
    transfer_ns,
)
from nki_agent.toolchain.cost.hardware import TRN1, TRN2, Constants
from trace_builders import TB

C0 = Constants()


def test_efficiency_curve_matches_the_documented_points() -> None:
    knee = C0.dma_knee_bytes
    assert efficiency(4096, knee) == 1.0 and efficiency(65536, knee) == 1.0  # >= 4 KiB saturates
    assert 0.85 <= efficiency(2048, knee) < 1.0  # >= 2 KiB recommended
    assert efficiency(256, knee) < 0.4  # < 256 B far below peak
    rows = [64, 128, 256, 512, 1024, 2048, 4096]
    effs = [efficiency(r, knee) for r in rows]
    assert effs == sorted(effs)
    assert efficiency(256, knee * 2) < efficiency(256, knee)  # a larger knee is a steeper penalty


def test_one_transfer_spreads_over_engines_of_eight_partitions() -> None:
    assert engines_used(128, TRN1) == 16
    assert engines_used(8, TRN1) == 1
    assert engines_used(9, TRN1) == 2
    assert engines_used(1000, TRN1) == 16


def test_transfer_time_is_fixed_plus_bytes_over_bandwidth() -> None:
    big = DmaShape(nbytes=128 * 4096, row_bytes=4096, partitions=128)
    assert transfer_ns(big, TRN1, C0) == pytest.approx(1300 + 128 * 4096 / 272)
    assert transfer_ns(big, TRN2, C0) == pytest.approx(1300 + 128 * 4096 / 368)
    one_engine = DmaShape(nbytes=8 * 4096, row_bytes=4096, partitions=8)
    assert transfer_ns(one_engine, TRN1, C0) == pytest.approx(1300 + 8 * 4096 / 17)


def test_time_grows_linearly_with_bytes_and_small_rows_cost_more() -> None:
    times = [transfer_ns(DmaShape(128 * r, r, 128), TRN1, C0) - C0.dma_fixed_ns for r in (4096, 8192, 16384)]
    assert times[1] == pytest.approx(2 * times[0]) and times[2] == pytest.approx(4 * times[0])
    same_bytes = [transfer_ns(DmaShape(128 * 4096, row, 128), TRN1, C0) for row in (256, 1024, 4096)]
    assert same_bytes[0] > same_bytes[1] > same_bytes[2]


def test_dma_shape_of_loads() -> None:
    tb = TB()
    wide = tb.hbm(1024, 8192)  # bf16 rows of 16 KiB
    t = tb.sbuf(128, 128)
    sh = dma_shape(tb.load(t.all(), wide.view(0, 128, 0, 128)))
    assert (sh.nbytes, sh.row_bytes, sh.partitions, sh.hbm_bytes) == (128 * 128 * 2, 256, 128, 128 * 128 * 2)
    contiguous = tb.hbm(128, 128)
    sh = dma_shape(tb.load(t.all(), contiguous.all()))
    assert sh.row_bytes == 256  # a contiguous HBM block still lands one partition row per descriptor
    store = dma_shape(tb.store(wide.view(0, 128, 0, 4096), tb.sbuf(128, 4096).all()))
    assert store.row_bytes == 8192 and store.hbm_bytes == 128 * 4096 * 2
    cast = dma_shape(tb.load(tb.sbuf(128, 128, "float32").all(), contiguous.all()))
    assert cast.nbytes == 128 * 128 * 4  # a casting DMA moves fp32
    tr = dma_shape(tb.instr("nl.load_transpose2d", [contiguous.all()], [t.all()]), transpose=True)
    assert tr.factor == 0.9
    sb = dma_shape(tb.instr("nisa.dma_copy", [t.all()], [tb.sbuf(128, 128).all()]), transpose=True)
    assert sb.factor == 0.5


def test_fluid_pool_serves_the_aggregate_first_come_first_served() -> None:
    pool = FluidPool(272)
    pool.add(0, 272_000.0, 272)
    assert pool.next_finish() == (1000.0, 0)
    pool.add(1, 272_000.0, 272)  # started later: waits for what the first leaves
    assert pool.rates == {0: 272.0, 1: 0.0} and pool.next_finish() == (1000.0, 0)
    pool.advance(1000.0)
    pool.remove(0)
    assert pool.rates == {1: 272.0} and pool.next_finish() == (2000.0, 1)
    narrow = FluidPool(272)
    narrow.add(0, 17_000.0, 17)  # a single-engine transfer keeps 17 B/ns, the next one takes the rest
    narrow.add(1, 255_000.0, 272)
    assert narrow.rates == {0: 17.0, 1: 255.0}
    assert sum(narrow.rates.values()) == pytest.approx(272)


def test_concurrent_transfers_share_the_ceiling() -> None:
    tb = TB()
    src = tb.hbm(128, 65536 // 2)
    a, b = tb.sbuf(128, 65536 // 2), tb.sbuf(128, 65536 // 2)
    tb.load(a.all(), src.all())
    tb.load(b.all(), src.all())
    est = estimate(tb.trace, timeline=True)
    bars = sorted((bar for bar in est.timeline if bar.lane.startswith("DMA")), key=lambda bar: bar.end_us)
    each = 128 * 65536 / 272 / 1000
    assert len(bars) == 2 and bars[0].start_us == bars[1].start_us
    assert bars[0].end_us - bars[0].start_us == pytest.approx(each)  # the first at the full ceiling
    assert bars[1].end_us - bars[1].start_us == pytest.approx(2 * each)  # the second after it: 2x in total


def test_kernel_dma_throughput_is_capped_by_the_per_core_aggregate() -> None:
    tb = TB()
    src = tb.hbm(128 * 64, 8192, "float32")  # rows of 32 KiB
    for i in tb.loop("affine", 64):
        tb.load(tb.sbuf(128, 8192, "float32").all(), src.view(i * 128, (i + 1) * 128))
    est = estimate(tb.trace)
    total = 64 * 128 * 8192 * 4
    kernel_ns = (est.latency_us - est.overhead_us) * 1000
    assert total / kernel_ns <= 272 * 1.001
    assert total / kernel_ns > 0.9 * 272  # and reaches it (HBM peak, 410 GB/s per core, is not the cap)
    assert est.bound == "DMA"


def test_spill_traffic_when_sbuf_is_over_capacity() -> None:
    assert spill(0, TRN1, C0) is None
    assert spill(TRN1.sbuf_bytes, TRN1, C0) is None
    sp = spill(TRN1.sbuf_bytes + 2**20, TRN1, C0)
    assert sp is not None and sp.excess_bytes == 2**20 and sp.traffic_bytes == 2 * 2**20
    assert sp.ns == pytest.approx(2 * 2**20 / 272)
    assert "SBUF over capacity" in sp.note
    # the tiles of the trace live at once: an SBUF buffer over capacity written whole, then read whole
    tb = TB()
    big = tb.sbuf(128, TRN1.sbuf_bytes // 128 // 4 + 2**13, "float32")
    tb.op("nisa.memset", big.all())
    tb.op("nisa.tensor_copy", tb.sbuf(128, 512).all(), big.all())
    fits = estimate(tb.trace, peak_sbuf_bytes=2**20)
    over = estimate(tb.trace, peak_sbuf_bytes=TRN1.sbuf_bytes + 2**20)
    assert over.latency_us == pytest.approx(fits.latency_us + sp.ns / 1000)
    assert over.hbm_bytes == fits.hbm_bytes + 2 * 2**20
    assert any("SBUF over capacity" in n for n in over.notes) and not any("SBUF" in n for n in fits.notes)


def test_spill_only_where_the_tiles_live_at_once_exceed_capacity() -> None:
    """Issue 24: over capacity by whole buffers (the simulator's liveness) but not by the tiles live at once
    is a zero-time "may spill" note; the charged excess is the smaller of the two."""
    may = spill(TRN1.sbuf_bytes + 2**20, TRN1, C0, tile_peak=2**20)
    assert may is not None and may.ns == 0.0 and may.traffic_bytes == 0 and "may spill" in may.note
    both = spill(TRN1.sbuf_bytes + 2**21, TRN1, C0, tile_peak=TRN1.sbuf_bytes + 2**20)
    assert both is not None and both.excess_bytes == 2**20
    tb = TB()
    tb.op("nisa.tensor_copy", tb.sbuf(128, 512).all(), tb.sbuf(128, 512).all())
    charged = estimate(tb.trace, peak_sbuf_bytes=TRN1.sbuf_bytes + 2**20)
    assert charged.latency_us == pytest.approx(estimate(tb.trace, peak_sbuf_bytes=2**20).latency_us)
    assert any("may spill" in n for n in charged.notes)
