"""Calibration: the fit recovers constants that produced the measurements, stays in bounds, the files
load and save, and bad files are errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from nki_agent.toolchain.cost import Constants, constants_for, estimate
from nki_agent.toolchain.cost.calibration import (
    Calibration,
    CalibrationError,
    calibration_filename,
    fit,
    from_estimate,
    load_calibration,
    nelder_mead,
    ratio_error,
    save,
    save_calibration,
)
from nki_agent.toolchain.sim.trace import Trace
from trace_builders import TB, matmul_tiled


def _vector_chain(n: int) -> Trace:
    tb = TB()
    t = [tb.sbuf(128, 64, "float32") for _ in range(n + 1)]
    for k in range(n):
        tb.op("nisa.tensor_scalar", t[k + 1].all(), t[k].all(), ops=("multiply",))
    return tb.trace


def test_nelder_mead_finds_the_minimum_of_a_bowl_inside_the_box() -> None:
    x, fx = nelder_mead(lambda v: (v[0] - 0.3) ** 2 + 2 * (v[1] + 0.5) ** 2, [0.0, 0.0], lo=-1.6, hi=1.6,
                        max_evals=400)
    assert x[0] == pytest.approx(0.3, abs=1e-3) and x[1] == pytest.approx(-0.5, abs=1e-3) and fx < 1e-6
    x, _ = nelder_mead(lambda v: (v[0] - 9.0) ** 2, [0.0], lo=-1.6, hi=1.6)
    assert x[0] == pytest.approx(1.6)  # clamped to the bound


def test_ratio_error() -> None:
    assert ratio_error([2.0, 0.5], [1.0, 1.0]) == pytest.approx(2.0)
    assert ratio_error([1.0], [1.0]) == 1.0


def test_fit_recovers_the_constants_that_made_the_measurements() -> None:
    truth = constants_for("trn1").with_values({"launch_overhead_us": 20.0, "dma_fixed_ns": 2000.0,
                                               "vector_fixed_cycles": 180.0})
    traces = [matmul_tiled(1, 1, 2), matmul_tiled(2, 2, 4), _vector_chain(40), _vector_chain(200), Trace()]
    pairs = [(tr, estimate(tr, "trn1", constants=truth).latency_us) for tr in traces]
    consts, before, after = fit(pairs, "trn1", free=("launch_overhead_us", "dma_fixed_ns", "vector_fixed_cycles"))
    assert before > 1.05 and after < 1.005 and after < before
    assert consts.launch_overhead_us == pytest.approx(20.0, rel=0.03)
    assert consts.vector_fixed_cycles == pytest.approx(180.0, rel=0.05)


def test_fit_accepts_callables_traces_with_peaks_and_estimates() -> None:
    pairs = [(lambda c: 2 * c.launch_overhead_us, 50.0)]
    consts, before, after = fit(pairs, "trn1", free=("launch_overhead_us",))
    assert consts.launch_overhead_us == pytest.approx(25.0, rel=1e-3)
    assert before == pytest.approx(50 / 30) and after == pytest.approx(1.0, abs=1e-3)
    tr = matmul_tiled(1, 1, 2)
    c2, _, _ = fit([((tr, 0), 40.0)], "trn1", free=("launch_overhead_us",))
    assert estimate(tr, constants=c2).latency_us == pytest.approx(40.0, rel=1e-3)
    est = estimate(tr)  # no sensitivities: only the launch overhead moves (exactly)
    c3, _, after3 = fit([(est, est.latency_us + 5.0)], "trn1")
    assert c3.launch_overhead_us == pytest.approx(20.0, rel=1e-3) and after3 == pytest.approx(1.0, abs=1e-3)


def test_fit_stays_within_five_times_the_defaults() -> None:
    consts, _, after = fit([(lambda c: c.launch_overhead_us, 1000.0)], "trn1", free=("launch_overhead_us",))
    assert consts.launch_overhead_us == pytest.approx(75.0)  # 5 x 15
    assert after == pytest.approx(1000 / 75)
    with pytest.raises(ValueError):
        fit([(lambda c: 1.0, 1.0)], "trn1", free=("source",))
    with pytest.raises(ValueError):
        fit([], "trn1")


def test_from_estimate_follows_the_model_for_small_changes() -> None:
    tr = matmul_tiled(2, 2, 8)
    est = estimate(tr, sensitivities=True)
    predict = from_estimate(est)
    base = constants_for("trn1")
    assert predict(base) == pytest.approx(est.latency_us)
    for name in ("launch_overhead_us", "dma_fixed_ns", "dma_knee_bytes"):
        moved = base.with_values({name: base.free_values()[name] * 1.1})
        assert predict(moved) == pytest.approx(estimate(tr, constants=moved).latency_us, rel=0.01), name


def test_calibration_files_round_trip(tmp_path: Path) -> None:
    consts = constants_for("trn1").with_values({"dma_fixed_ns": 1700.0})
    path = tmp_path / calibration_filename("trn1")
    save_calibration(path, Calibration("trn1", consts, pairs=4, error_before=1.6, error_after=1.1))
    body = json.loads(path.read_text())
    assert body["target"] == "trn1" and body["pairs"] == 4 and body["constants"]["dma_fixed_ns"] == 1700.0
    cal = load_calibration("trn1", [tmp_path / "missing", tmp_path])
    assert cal is not None and cal.constants.dma_fixed_ns == 1700.0 and cal.error_after == 1.1
    assert cal.constants.source == str(path)
    assert estimate(matmul_tiled(1, 1, 1), constants=cal.constants).calibration == str(path)
    assert load_calibration("trn2", [tmp_path]) is None
    assert load_calibration("inf2", [tmp_path]) is not None  # an alias of trn1
    save(consts, tmp_path / "other.json", target="trn1")  # the CLI's seam: save(constants, path)
    assert json.loads((tmp_path / "other.json").read_text())["constants"] == consts.free_values()


@pytest.mark.parametrize("body,problem", [
    ("not json", "JSON"),
    ('{"target": "trn1"}', "constants"),
    ('{"target": "trn2", "constants": {}}', "calibrated for"),
    ('{"target": "trn1", "constants": {"warp_speed": 2}}', "unknown constant"),
    ('{"target": "trn1", "constants": {"dma_fixed_ns": -3}}', "positive"),
    ('{"target": "trn1", "constants": {"dma_fixed_ns": true}}', "positive"),
])
def test_bad_calibration_files_are_errors(tmp_path: Path, body: str, problem: str) -> None:
    (tmp_path / calibration_filename("trn1")).write_text(body)
    with pytest.raises(CalibrationError, match=problem):
        load_calibration("trn1", [tmp_path])


def test_defaults_are_the_documented_values() -> None:
    c = Constants()
    assert (c.launch_overhead_us, c.dma_fixed_ns, c.tensor_fixed_cycles, c.vector_fixed_cycles) == (15.0, 1300.0,
                                                                                                   64.0, 100.0)
    assert math.isclose(c.spill_factor, 2.0)
