"""Latency statistics from raw figures, and the adaptive timing loop's stop rule (a fake clock: no sleeping)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from nki_agent.runner import latency
from nki_agent.runner.latency import LoopPolicy, next_window


def test_skewed_samples_have_a_true_mean_that_is_not_the_median() -> None:
    samples = [10.0] * 9 + [100.0]
    lat = latency.summarize(samples, warmup=3, source="BaremetalExecutor", window=5, core_id=1, target="trn1")
    assert lat.kind == "measured" and lat.p50_us == 10.0 and lat.mean_us == pytest.approx(19.0)
    assert lat.mean_us != lat.p50_us
    assert lat.std_us == pytest.approx(float(np.std(samples, ddof=1)))
    assert lat.min_us == 10.0 and lat.max_us == 100.0 and lat.p99_us == pytest.approx(np.percentile(samples, 99))
    assert lat.iterations == 10 and lat.warmup == 3 and lat.core_id == 1 and lat.target == "trn1"
    assert lat.spread == pytest.approx((np.percentile(samples[-5:], 99) - 10.0) / 10.0)


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [1.0, -2.0], [0.0], [float("inf")], ["3"], [True],
                                 "12", None, [1.0] * 2000])
def test_figures_that_are_not_measurements_are_refused(bad: object) -> None:
    with pytest.raises(latency.BadSamples):
        latency.summarize(bad, warmup=0, source="x", window=5)


def _grid(values: list[float]) -> dict[str, float]:
    return {str(p): v for p, v in zip(latency.PERCENTILES, values)}


def test_benchmark_percentiles_integrate_to_a_mean_above_a_skewed_median() -> None:
    w1 = {"iterations": 10, "percentiles": _grid([540, 541, 542, 543, 544, 546, 560, 600])}
    w2 = {"iterations": 10, "percentiles": _grid([538, 540, 541, 542, 544, 545, 546, 547])}
    lat = latency.summarize_percentiles([w1, w2], warmup=5, source="nki.benchmark")
    assert lat.p50_us == 544 and lat.p99_us == 546 and lat.min_us == 538 and lat.max_us == 600
    assert lat.iterations == 20 and lat.spread == pytest.approx(2 / 544)
    assert lat.mean_us is not None and lat.std_us is not None and lat.std_us > 0
    assert 540 < lat.mean_us < 560 and lat.mean_us != lat.p50_us
    flat = latency.summarize_percentiles([{"iterations": 3, "percentiles": _grid([7.0] * 8)}], warmup=0, source="b")
    assert flat.mean_us == pytest.approx(7.0) and flat.std_us == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("bad", [[], [{"iterations": 0, "percentiles": _grid([1] * 8)}],
                                 [{"iterations": 5, "percentiles": _grid([5, 4, 3, 2, 1, 1, 1, 1])}],
                                 [{"iterations": 5, "percentiles": {"50": 3.0}}],
                                 [{"iterations": 5, "percentiles": _grid([1, 1, 1, 1, float("nan"), 1, 1, 1])}]])
def test_benchmark_windows_that_are_not_a_distribution_are_refused(bad: object) -> None:
    with pytest.raises(latency.BadSamples):
        latency.summarize_percentiles(bad, warmup=0, source="nki.benchmark")


def test_the_loop_stops_at_one_percent_spread() -> None:
    p = LoopPolicy(warmup=2, max_iterations=50, time_budget_s=30.0, window=10)
    assert next_window(p, 0, None, 0.0) == 10  # at least one window, whatever the clock says
    assert next_window(p, 0, None, 99.0) == 10
    assert next_window(p, 10, 0.05, 1.0) == 10  # too noisy: another window
    assert next_window(p, 20, 0.01, 1.0) == 0 and latency.stop_reason(p, 20, 0.01, 1.0) == "spread"
    assert next_window(p, 20, 0.2, 31.0) == 0 and latency.stop_reason(p, 20, 0.2, 31.0) == "time budget"
    assert next_window(p, 45, 0.2, 1.0) == 5  # the last window is cut to the cap
    assert next_window(p, 50, 0.2, 1.0) == 0 and latency.stop_reason(p, 50, 0.2, 1.0) == "iterations"


def test_run_loop_warms_up_then_times_windows_until_the_rule_says_stop() -> None:
    noisy = iter([[10.0, 30.0, 10.0, 10.0, 50.0], [10.0, 10.1, 10.0, 10.0, 10.05]])
    calls: list[tuple[str, int]] = []

    def timed(n: int) -> list[float]:
        calls.append(("timed", n))
        return next(noisy)

    now = [0.0]

    def clock() -> float:
        now[0] += 0.5
        return now[0]

    samples, why = latency.run_loop(LoopPolicy(warmup=3, max_iterations=100, window=5),
                                    lambda n: calls.append(("warmup", n)), timed, clock)
    assert calls == [("warmup", 3), ("timed", 5), ("timed", 5)] and len(samples) == 10 and why == "spread"


def test_run_loop_stops_at_the_time_budget_with_a_fake_clock() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 4.0
        return now[0]

    samples, why = latency.run_loop(LoopPolicy(warmup=0, max_iterations=1000, time_budget_s=10.0, window=5),
                                    lambda n: None, lambda n: [1.0, 2.0] * n, clock)
    assert why == "time budget" and 0 < len(samples) < 1000 and len(samples) % 5 == 0


def test_a_policy_from_a_request_is_bounded() -> None:
    p = LoopPolicy.from_json({"warmup": 10**9, "max_iterations": -5, "time_budget_s": float("nan"), "window": "x"})
    assert p.warmup == 100 and p.max_iterations == 1 and p.time_budget_s == 30.0 and p.window == 0
    assert LoopPolicy.from_json(LoopPolicy(7, 20, 3.0).as_json()) == LoopPolicy(7, 20, 3.0)
    assert LoopPolicy(max_iterations=50).window_size() == 10 and LoopPolicy(max_iterations=3).window_size() == 3


def test_speedup_needs_two_measurements() -> None:
    k = latency.summarize([10.0, 10.0], warmup=0, source="nki.benchmark", window=2)
    b = latency.summarize([150.0, 150.0], warmup=0, source="cpu", window=2)
    assert latency.speedup(k, b) == pytest.approx(15.0)
    b.kind = "not measured"
    assert latency.speedup(k, b) is None
    assert math.isinf(latency.spread_of([0.0, 0.0, 1.0]) or 0.0) and latency.spread_of([]) is None
