"""Latency figures and the adaptive timing loop, for the kernel on a device and for the task's baseline.

Who computes what: the roles that time something (``toolchain/judging/device_role.py``, ``baseline_role.py``)
only *measure* — warmup, then timed windows as ``next_window`` decides — and send the raw figures;
the parent turns them into a ``protocol.Latency`` here (``summarize`` for raw per-iteration
microseconds, ``summarize_percentiles`` for what ``nki.benchmark`` exposes: its percentile grid per
window). Statistics are never taken from the timed process, so a kernel that patches the SDK's
statistics in its own process changes nothing here, and a figure that is not a finite positive
number of microseconds is refused.

The loop policy (``next_window``, a pure function of what was measured so far): after the warmup,
iterations run in windows of ``LoopPolicy.window_size()`` until the last window's spread
``(p99 - p50) / p50`` is at most ``target_spread`` (1 %), or ``max_iterations`` were timed, or the
time budget is spent — at least one window is always timed. ``run_loop`` drives it with a clock
passed in (tests pass a fake one: nothing here sleeps).

This module is imported inside the jail by the roles: it needs NumPy only (pydantic is imported by
the parent-side functions when they are called).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nki_agent.toolchain.protocol.jobs import Latency, LatencyKind

TARGET_SPREAD = 0.01  # stop once the last window's (p99 - p50) / p50 is at most 1 %
MIN_WINDOW = 10
MAX_SAMPLE_US = 3.6e9  # one iteration longer than an hour is not a latency
PERCENTILES = (0, 1, 10, 25, 50, 90, 99, 100)  # the grid nki.benchmark's nc_latency answers for


@dataclass(frozen=True)
class LoopPolicy:
    """How long to time: warmup iterations, then windows until the spread is low or a limit is reached."""

    warmup: int = 5
    max_iterations: int = 50
    time_budget_s: float = 30.0
    target_spread: float = TARGET_SPREAD
    window: int = 0  # iterations per window; 0 = max(MIN_WINDOW, max_iterations // 5)

    def window_size(self) -> int:
        w = self.window if self.window > 0 else max(MIN_WINDOW, self.max_iterations // 5)
        return max(1, min(w, self.max_iterations))

    def as_json(self) -> dict[str, Any]:
        return {"warmup": self.warmup, "max_iterations": self.max_iterations, "time_budget_s": self.time_budget_s,
                "target_spread": self.target_spread, "window": self.window}

    @classmethod
    def from_json(cls, raw: Any) -> LoopPolicy:
        """The policy of a worker request (bounded: a request cannot ask for an endless loop)."""
        raw = raw if isinstance(raw, Mapping) else {}

        def num(key: str, default: float, lo: float, hi: float) -> float:
            v = raw.get(key, default)
            return min(max(float(v), lo), hi) if isinstance(v, (int, float)) and math.isfinite(v) else default

        return cls(warmup=int(num("warmup", 5, 0, 100)), max_iterations=int(num("max_iterations", 50, 1, 1000)),
                   time_budget_s=num("time_budget_s", 30.0, 0.001, 900.0),
                   target_spread=num("target_spread", TARGET_SPREAD, 0.0, 1.0), window=int(num("window", 0, 0, 1000)))


def percentile(samples: Sequence[float], p: float) -> float:
    """Linear-interpolation percentile (NumPy's default) of ``samples`` (not empty)."""
    s = sorted(samples)
    k = (len(s) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def spread_of(samples: Sequence[float]) -> float | None:
    """``(p99 - p50) / p50`` of one window; None for an empty window."""
    if not samples:
        return None
    p50 = percentile(samples, 50)
    return (percentile(samples, 99) - p50) / p50 if p50 > 0 else math.inf


def next_window(policy: LoopPolicy, done: int, last_spread: float | None, elapsed_s: float) -> int:
    """How many iterations to time next (0: stop), after ``done`` timed iterations whose last window had
    ``last_spread``, ``elapsed_s`` seconds into the loop (the warmup included). Pure."""
    if done >= policy.max_iterations:
        return 0
    if done > 0 and elapsed_s >= policy.time_budget_s:
        return 0
    if done > 0 and last_spread is not None and last_spread <= policy.target_spread:
        return 0
    return min(policy.window_size(), policy.max_iterations - done)


def stop_reason(policy: LoopPolicy, done: int, last_spread: float | None, elapsed_s: float) -> str:
    """Why ``next_window`` stopped: ``spread``, ``iterations`` or ``time budget`` ("" if it did not)."""
    if next_window(policy, done, last_spread, elapsed_s):
        return ""
    if last_spread is not None and last_spread <= policy.target_spread:
        return "spread"
    return "iterations" if done >= policy.max_iterations else "time budget"


def run_loop(policy: LoopPolicy, warmup: Callable[[int], object], timed: Callable[[int], Sequence[float]],
             clock: Callable[[], float] = time.monotonic) -> tuple[list[float], str]:
    """Warm up, then time windows while ``next_window`` says so: ``timed(n)`` runs ``n`` iterations and
    returns their latencies (µs). Returns every timed sample and why the loop stopped."""
    t0 = clock()
    if policy.warmup:
        warmup(policy.warmup)
    samples: list[float] = []
    last: float | None = None
    while True:
        n = next_window(policy, len(samples), last, clock() - t0)
        if n <= 0:
            return samples, stop_reason(policy, len(samples), last, clock() - t0)
        window = [float(x) for x in timed(n)][:n]
        if not window:
            return samples, "no samples"
        samples += window
        last = spread_of(window)


# ---------------------------------------------------------------- the parent's side: raw figures -> Latency


class BadSamples(ValueError):
    """Figures that are not finite positive microseconds (or too many of them)."""


def _check(samples: Any, limit: int) -> list[float]:
    if not isinstance(samples, (list, tuple)) or not samples:
        raise BadSamples("no timed iterations")
    if len(samples) > limit:
        raise BadSamples(f"{len(samples)} samples, more than the {limit} the loop may time")
    out = []
    for x in samples:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or not 0 < x <= MAX_SAMPLE_US:
            raise BadSamples(f"a latency of {x!r} µs is not a measurement")
        out.append(float(x))
    return out


def summarize(samples_us: Any, *, warmup: int, source: str, window: int, kind: LatencyKind = "measured",
              core_id: int | None = None, target: str | None = None, limit: int = 1000) -> Latency:
    """Raw per-iteration latencies (µs) → ``Latency``: p50, p99, min, max, the true mean, std (sample),
    iterations, warmup, and the spread of the last ``window`` samples. Raises ``BadSamples``."""
    from nki_agent.toolchain.protocol.jobs import Latency

    s = _check(samples_us, limit)
    mean = math.fsum(s) / len(s)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in s) / (len(s) - 1)) if len(s) > 1 else 0.0
    last = s[-max(1, min(window, len(s))):]
    return Latency(kind=kind, source=source, p50_us=percentile(s, 50), p99_us=percentile(s, 99), min_us=min(s),
                   max_us=max(s), mean_us=mean, std_us=std, iterations=len(s), warmup=warmup,
                   spread=spread_of(last), core_id=core_id, target=target)


def _grid(raw: Any) -> list[tuple[float, float]]:
    """One window's percentile readings as sorted (quantile, µs) pairs over the whole 0..100 grid."""
    if not isinstance(raw, Mapping):
        raise BadSamples("a benchmark window without percentiles")
    pts = []
    for p in PERCENTILES:
        v = raw.get(str(p), raw.get(p))  # type: ignore[call-overload]
        pts.append((p / 100.0, _check([v], 1)[0]))
    if any(b[1] < a[1] for a, b in itertools.pairwise(pts)):
        raise BadSamples("benchmark percentiles that decrease are not a distribution")
    return pts


def _moments(pts: list[tuple[float, float]]) -> tuple[float, float]:
    """Mean and E[x²] of the piecewise-linear quantile function through ``pts``."""
    m1 = m2 = 0.0
    for (u0, q0), (u1, q1) in itertools.pairwise(pts):
        du = u1 - u0
        m1 += du * (q0 + q1) / 2
        m2 += du * (q0 * q0 + q0 * q1 + q1 * q1) / 3
    return m1, m2


def summarize_percentiles(windows: Any, *, warmup: int, source: str, kind: LatencyKind = "measured",
                          core_id: int | None = None, target: str | None = None, limit: int = 1000) -> Latency:
    """``nki.benchmark`` windows (``{"iterations": n, "percentiles": {"0": µs, ..., "100": µs}}``) →
    ``Latency``. p50 / p99 / spread are the last window's (the one the loop stopped on); min / max over
    all windows; mean and std are integrated from the percentile grid (iteration-weighted over the
    windows) — the benchmark exposes no per-iteration figures, and its p50 is not its mean."""
    from nki_agent.toolchain.protocol.jobs import Latency

    if not isinstance(windows, (list, tuple)) or not windows:
        raise BadSamples("no benchmark windows")
    parsed: list[tuple[int, list[tuple[float, float]]]] = []
    for w in windows:
        n = w.get("iterations") if isinstance(w, Mapping) else None
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise BadSamples("a benchmark window without its iteration count")
        parsed.append((n, _grid(w.get("percentiles"))))
    total = sum(n for n, _ in parsed)
    if total > limit:
        raise BadSamples(f"{total} iterations, more than the {limit} the loop may time")
    m1 = math.fsum(n * _moments(g)[0] for n, g in parsed) / total
    m2 = math.fsum(n * _moments(g)[1] for n, g in parsed) / total
    last = {round(u * 100): q for u, q in parsed[-1][1]}
    p50, p99 = last[50], last[99]
    return Latency(kind=kind, source=source, p50_us=p50, p99_us=p99, min_us=min(g[0][1] for _, g in parsed),
                   max_us=max(g[-1][1] for _, g in parsed), mean_us=m1, std_us=math.sqrt(max(0.0, m2 - m1 * m1)),
                   iterations=total, warmup=warmup, spread=(p99 - p50) / p50, core_id=core_id, target=target)


def speedup(kernel: Latency, baseline: Latency) -> float | None:
    """Baseline p50 over kernel p50, when both were measured."""
    if kernel.kind != "measured" or baseline.kind != "measured" or not kernel.p50_us or not baseline.p50_us:
        return None
    return baseline.p50_us / kernel.p50_us
