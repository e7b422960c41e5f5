"""``estimate``: the headline numbers, bounds, notes, utilisations, the timeline bound, the result's wire form."""

from __future__ import annotations

import pytest
from nki_agent.toolchain.cost import FREE, Constants, constants_for, estimate
from nki_agent.toolchain.cost.attribution import MAX_BARS
from nki_agent.toolchain.protocol.cost import CostEstimate
from nki_agent.toolchain.sim.trace import Trace
from trace_builders import TB, matmul_tiled


def test_empty_trace_is_the_launch_overhead() -> None:
    est = estimate(Trace(target="trn1"))
    assert est.latency_us == est.overhead_us == 15.0
    assert est.bound == "overhead" and est.instructions == 0
    assert any("no instructions" in n for n in est.notes)


def test_tiny_kernel_is_overhead_bound() -> None:
    tb = TB()
    t = tb.sbuf(128, 512, "float32")
    tb.load(t.all(), tb.hbm(128, 512, "float32").all())
    tb.store(tb.hbm(128, 512, "float32").all(), t.all())
    est = estimate(tb.trace)
    assert est.bound == "overhead"
    assert 15.0 < est.latency_us < 25.0  # [LG]: tiny kernels floor at about 15-20 us


def test_dma_bound_tiled_matmul() -> None:
    m, n, k = 4, 2, 8
    est = estimate(matmul_tiled(m, n, k))
    assert est.bound == "DMA"
    assert est.flops == 2 * (128 * m) * (512 * n) * (128 * k)
    loads = m * n * k * (128 * 128 * 2 + 128 * 512 * 2)
    stores = m * n * 128 * 512 * 2
    assert est.hbm_bytes == loads + stores
    assert 0 < est.bandwidth_utilisation <= 1 and 0 < est.flop_utilisation < 0.5
    assert {e.engine for e in est.engines} == {"tensor", "vector", "dma"}
    assert sum(e.instructions for e in est.engines) == est.instructions - m * n  # the folded PSUM zeroings
    assert est.lines[0].engine == "dma"


def test_tensore_bound_kernel_reaches_near_peak() -> None:
    tb = TB()
    a, b = tb.sbuf(128, 128), tb.sbuf(128, 512)
    tb.load(a.all(), tb.hbm(128, 128).all())
    tb.load(b.all(), tb.hbm(128, 512).all())
    for _ in tb.loop("affine", 64, var="j"):
        acc = tb.psum(128, 512)
        for _ in tb.loop("affine", 32, line=11, var="k"):
            tb.matmul(acc.all(), a.all(), b.all(), accumulate=True)
        tb.op("nisa.tensor_copy", tb.sbuf(128, 512).all(), acc.all(), engine="scalar")
    est = estimate(tb.trace)
    assert est.bound == "TensorE"
    assert est.flop_utilisation > 0.85
    tensor = next(e for e in est.engines if e.lane == "TensorE")
    assert tensor.utilisation > 0.85 and tensor.instructions == 64 * 32
    assert next(lc for lc in est.loops if lc.var == "k").bound == "TensorE"


def test_fp32_matmul_utilisation_is_against_the_fp32_peak() -> None:
    tb = TB()
    a, b = tb.sbuf(128, 128, "float32"), tb.sbuf(128, 512, "float32")
    acc = tb.psum(128, 512)
    for _ in tb.loop("affine", 256):
        tb.matmul(acc.all(), a.all(), b.all(), accumulate=True)
    est = estimate(tb.trace, constants=Constants(launch_overhead_us=0.001))
    assert est.flop_utilisation > 0.9  # 4x the cycles, against a quarter of the peak


def test_unknown_api_and_truncation_are_noted() -> None:
    tb = TB()
    tb.op("nisa.brand_new_op", tb.sbuf(128, 64, "float32").all(), tb.sbuf(128, 64, "float32").all())
    tb.trace.truncated = True
    est = estimate(tb.trace)
    assert est.truncated
    assert any("nisa.brand_new_op (1x)" in n for n in est.notes)
    assert any("truncated" in n for n in est.notes)


def test_timeline_is_bounded_and_marks_the_critical_path() -> None:
    est = estimate(matmul_tiled(8, 4, 32), timeline=True)  # ~2.1k instructions
    assert len(est.timeline) == sum(e.instructions for e in est.engines)
    assert any(b.critical for b in est.timeline)
    big = estimate(matmul_tiled(16, 8, 16), timeline=True)  # ~6.4k instructions: merged
    assert len(big.timeline) <= MAX_BARS + 20
    assert all(b.end_us >= b.start_us >= 0 for b in big.timeline)
    assert max(b.end_us for b in big.timeline) <= big.latency_us - big.overhead_us + 1e-6
    assert not estimate(matmul_tiled(2, 2, 2)).timeline


def test_target_defaults_to_the_trace_and_accepts_aliases() -> None:
    tr = matmul_tiled(1, 1, 2, target="trn2")
    assert estimate(tr).target == "trn2"
    assert estimate(tr, "inf2").target == "trn1"
    with pytest.raises(ValueError):
        estimate(tr, "trn9")


def test_constants_change_the_estimate_and_are_reported() -> None:
    tr = matmul_tiled(2, 2, 4)
    base = estimate(tr)
    slower = estimate(tr, constants=constants_for("trn1").with_values({"dma_fixed_ns": 5000.0}, source="x.json"))
    assert slower.latency_us > base.latency_us
    assert slower.calibration == "x.json" and base.calibration == ""
    assert slower.constants["dma_fixed_ns"] == 5000.0 and set(base.constants) == set(FREE)
    assert estimate(tr, constants=Constants(launch_overhead_us=30.0)).latency_us == pytest.approx(
        base.latency_us + 15.0)
    with pytest.raises(ValueError):
        constants_for("trn1").with_values({"not_a_constant": 1.0})


def test_sensitivities_are_opt_in_and_exact_for_the_overhead() -> None:
    tr = matmul_tiled(2, 2, 4)
    assert not estimate(tr).sensitivities
    est = estimate(tr, sensitivities=True)
    assert set(est.sensitivities) == set(FREE)
    assert est.sensitivities["launch_overhead_us"] == pytest.approx(est.overhead_us / est.latency_us)
    assert est.sensitivities["spill_factor"] == 0.0  # no spill
    assert est.sensitivities["dma_knee_bytes"] > 0.0  # DMA-bound with 256 B and 1 KiB rows


def test_result_round_trips_through_json() -> None:
    est = estimate(matmul_tiled(2, 2, 8), timeline=True, sensitivities=True)
    again = CostEstimate.model_validate_json(est.model_dump_json())
    assert again == est
    assert est.summary().startswith("≈ ") and "DMA-bound" in est.summary()
