"""Calibration: fit the FREE constants to measured latencies, and the per-target calibration files.

File: ``nki-agent-calibration-<target>.json`` =
``{"target": "trn1", "constants": {<free name>: value, ...}, "pairs": N, "error_before": x, "error_after": y}``.
``load_calibration(target, search)`` returns the first such file in the given folders (the caller
passes the workspace and ``~/.config/nki-agent/``); a malformed file, a file for another target or
an unknown constant is an error (``CalibrationError``), never silently ignored.

``fit(pairs, target)``: a pair is ``(source, measured_us)`` where ``source`` is a callable
``Constants -> predicted us``, a ``Trace``, or ``(Trace, peak_sbuf_bytes)`` (prepared once, re-timed per
evaluation). The fit minimises the mean squared log error over the free constants, each searched in
log space within [0.2x, 5x] of its documented default, with a small Nelder-Mead simplex written here
(no scipy: eight parameters at most, a few hundred evaluations). Errors are reported as the geometric
mean of max(pred/meas, meas/pred) (1.0 = exact).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Union

from ..sim.trace import Trace
from .hardware import FREE, Constants, constants_for, hardware_for
from .model import latency_us
from .schedule import prepare

if TYPE_CHECKING:
    from nki_agent.toolchain.protocol.cost import CostEstimate

BOUND = 5.0  # each free constant stays within [default / 5, default x 5] (the brief's [0.2x, 5x])
Source = Union[Callable[[Constants], float], Trace, tuple[Trace, int], "CostEstimate"]
Pair = tuple[Source, float]


class CalibrationError(ValueError):
    """A calibration file that cannot be used (it names the file and the problem)."""


@dataclass(frozen=True)
class Calibration:
    """One target's fitted constants and how well they fit."""

    target: str
    constants: Constants
    pairs: int = 0
    error_before: float = 0.0
    error_after: float = 0.0


def calibration_filename(target: str) -> str:
    return f"nki-agent-calibration-{hardware_for(target).target}.json"


def load_calibration(target: str, search: Sequence[str | Path]) -> Calibration | None:
    """The first calibration file for ``target`` in the ``search`` folders (None: there is none)."""
    name = calibration_filename(target)
    for folder in search:
        path = Path(folder).expanduser() / name
        if path.is_file():
            return _parse(path, hardware_for(target).target)
    return None


PACKAGED = Path(__file__).resolve().parent  # nki-agent-calibration-<target>.json shipped beside this module (docs/cost-model.md)


def config_dirs() -> list[Path]:
    """Where a user's calibration files live: ``$NKI_AGENT_CONFIG_DIR`` if set, else ``~/.config/nki-agent``."""
    import os

    env = os.environ.get("NKI_AGENT_CONFIG_DIR")
    return [Path(env)] if env else [Path("~/.config/nki-agent").expanduser()]


def effective_constants(target: str, overrides: dict[str, dict[str, float]] | None = None) -> Constants:
    """The constants an estimate for ``target`` uses: ``overrides[target]`` (a user's calibration, read by
    the parent process and sent with the job: the jail sees no home folder), else the calibration shipped
    with the package (fitted on the published trn1 measurements; trn2 and trn3, which have none, use trn1's
    fitted free constants with their own documented hardware numbers), else the documented defaults. A
    broken packaged file falls back to the defaults. ``overrides=None`` (an in-process run) reads the
    user's calibration files itself."""
    name = hardware_for(target).target
    if overrides is None:
        overrides = request_field().get("cost_constants", {})
    values = overrides.get(name)
    if values:
        return constants_for(name).with_values({k: float(v) for k, v in values.items() if k in FREE},
                                               source=f"user {calibration_filename(name)}")
    for source in (name, "trn1"):  # no published trn2/trn3 measurements: trn1's fitted free constants
        cal = _packaged(source)
        if cal is not None:
            return constants_for(name).with_values(cal.constants.free_values(),
                                                   source=f"packaged {calibration_filename(source)}")
    return constants_for(name)


@lru_cache(maxsize=None)
def _packaged(target: str) -> Calibration | None:
    """The calibration shipped with the package (read once per process; a broken one is None)."""
    try:
        return load_calibration(target, [PACKAGED])
    except CalibrationError:
        return None


def user_overrides() -> dict[str, dict[str, float]]:
    """The user's calibration files (every target that has one) as plain values, for a job request.
    A malformed file raises ``CalibrationError`` (naming it): a calibration is never silently ignored."""
    out: dict[str, dict[str, float]] = {}
    for target in ("trn1", "trn2", "trn3"):
        cal = load_calibration(target, config_dirs())
        if cal is not None:
            out[target] = cal.constants.free_values()
    return out


def request_field() -> dict[str, dict[str, dict[str, float]]]:
    """``{"cost_constants": user_overrides()}`` for a job request, or {} when the user has no calibration. A
    malformed calibration file is reported on stderr once per process and not used (the job still runs)."""
    global _WARNED
    try:
        found = user_overrides()
    except CalibrationError as e:
        if not _WARNED:
            import sys

            print(f"nki-agent: calibration not used: {e}", file=sys.stderr)
            _WARNED = True
        return {}
    return {"cost_constants": found} if found else {}


_WARNED = False


def parse_overrides(value: object) -> dict[str, dict[str, float]]:
    """A request's ``cost_constants`` checked: {target: {free constant: positive finite number}} (the
    worker's side; anything else raises ValueError: a malformed request)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("cost_constants must be an object")
    out: dict[str, dict[str, float]] = {}
    for target, consts in value.items():
        name = hardware_for(str(target)).target
        if not isinstance(consts, dict):
            raise ValueError(f"cost_constants[{target!r}] must be an object")
        vals: dict[str, float] = {}
        for k, v in consts.items():
            if k not in FREE or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"cost_constants[{target!r}][{k!r}]: not a free constant with a positive value")
            vals[k] = float(v)
        out[name] = vals
    return out


def _parse(path: Path, target: str) -> Calibration:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CalibrationError(f"{path}: not a readable JSON file ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("constants"), dict):
        raise CalibrationError(f"{path}: expected an object with a 'constants' object")
    if str(data.get("target", "")) and hardware_for(str(data["target"])).target != target:
        raise CalibrationError(f"{path}: calibrated for {data['target']!r}, not {target!r}")
    values: dict[str, float] = {}
    for k, v in data["constants"].items():
        if k not in FREE:
            raise CalibrationError(f"{path}: unknown constant {k!r} (free constants: {', '.join(FREE)})")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise CalibrationError(f"{path}: constant {k!r} must be a positive number, got {v!r}")
        values[k] = float(v)
    consts = constants_for(target).with_values(values, source=str(path))
    return Calibration(target, consts, int(data.get("pairs", 0) or 0), float(data.get("error_before", 0) or 0),
                       float(data.get("error_after", 0) or 0))


def save(constants: Constants, path: str | Path, *, target: str = "", pairs: int = 0, error_before: float = 0.0,
         error_after: float = 0.0) -> None:
    """Write ``constants`` as a calibration file (``target`` "" = valid for the target of its file name)."""
    save_calibration(path, Calibration(target, constants, pairs, error_before, error_after))


def save_calibration(path: str | Path, cal: Calibration) -> None:
    """Write ``cal`` as a calibration file (the free constants only)."""
    body = {"target": cal.target, "constants": cal.constants.free_values(), "pairs": cal.pairs,
            "error_before": cal.error_before, "error_after": cal.error_after}
    Path(path).write_text(json.dumps(body, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def _predictor(source: Source, target: str) -> Callable[[Constants], float]:
    if hasattr(source, "latency_us") and hasattr(source, "sensitivities"):  # a CostEstimate
        return from_estimate(source)  # type: ignore[arg-type]
    if callable(source):
        return source
    trace, peak = (source, 0) if isinstance(source, Trace) else source
    p = prepare(trace, hardware_for(target or trace.target))
    return lambda c: latency_us(p, c, peak)


def from_estimate(est: "CostEstimate") -> Callable[[Constants], float]:
    """A predictor from an estimate alone: latency linear in each constant around the estimate's own,
    ``L0 · (1 + Σ s_k (c_k / c0_k - 1))`` with its sensitivities ``s_k`` (``estimate(...,
    sensitivities=True)``). Without sensitivities only the launch overhead moves (its effect is exact)."""
    base = dict(getattr(est, "constants", {}) or {})
    sens = dict(getattr(est, "sensitivities", {}) or {})
    l0 = est.latency_us
    if not sens and l0 > 0:
        base.setdefault("launch_overhead_us", est.overhead_us)
        sens = {"launch_overhead_us": est.overhead_us / l0}

    def predict(c: Constants) -> float:
        values = c.free_values()
        change = sum(s * (values[k] / base[k] - 1.0) for k, s in sens.items() if base.get(k, 0) > 0 and k in values)
        return max(l0 * (1.0 + change), l0 * 1e-3)
    return predict


def ratio_error(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Geometric mean of max(pred/meas, meas/pred) (1.0 = every prediction exact)."""
    if not measured:
        return 1.0
    return math.exp(sum(abs(math.log(p / m)) for p, m in zip(predicted, measured)) / len(measured))


def fit(pairs: Sequence[Pair], target: str, *, start: Constants | None = None, free: Sequence[str] = FREE,
        max_evals: int = 300) -> tuple[Constants, float, float]:
    """Fit the ``free`` constants to ``pairs``; returns (constants, error_before, error_after)."""
    base = start or constants_for(target)
    bad = sorted(set(free) - set(FREE))
    if bad:
        raise ValueError(f"not free constants: {', '.join(bad)}")
    predictors = [_predictor(src, target) for src, _ in pairs]
    measured = [float(m) for _, m in pairs]
    if not pairs or any(m <= 0 for m in measured):
        raise ValueError("fit needs at least one pair with a positive measured latency")
    defaults = constants_for(target).free_values()
    names = list(free)

    def consts_at(x: Sequence[float]) -> Constants:
        return base.with_values({n: defaults[n] * math.exp(v) for n, v in zip(names, x)})

    def predict(c: Constants) -> list[float]:
        return [max(f(c), 1e-9) for f in predictors]

    def loss(x: Sequence[float]) -> float:
        pred = predict(consts_at(x))
        return sum((math.log(p / m)) ** 2 for p, m in zip(pred, measured)) / len(measured)

    x0 = [math.log(base.free_values()[n] / defaults[n]) for n in names]
    x_best, f_best = nelder_mead(loss, x0, lo=-math.log(BOUND), hi=math.log(BOUND), max_evals=max_evals)
    before = ratio_error(predict(base), measured)
    if f_best >= loss(x0):
        return base, before, before
    best = consts_at(x_best)
    return best, before, ratio_error(predict(best), measured)


def nelder_mead(f: Callable[[Sequence[float]], float], x0: Sequence[float], *, lo: float, hi: float,
                max_evals: int = 300, step: float = 0.5, tol: float = 1e-6) -> tuple[list[float], float]:
    """Minimise ``f`` over the box [lo, hi]^d from ``x0`` (reflection 1, expansion 2, contraction 0.5,
    shrink 0.5; points are clamped into the box). Returns (best point, its value)."""
    d = len(x0)

    def clamp(x: Sequence[float]) -> list[float]:
        return [min(hi, max(lo, v)) for v in x]

    evals = 0

    def ev(x: list[float]) -> tuple[float, list[float]]:
        nonlocal evals
        evals += 1
        return f(x), x

    start = clamp(x0)
    simplex = [ev(start)]
    for k in range(d):
        x = list(start)
        x[k] = x[k] + step if x[k] + step <= hi else x[k] - step
        simplex.append(ev(clamp(x)))
    while evals < max_evals:
        simplex.sort(key=lambda t: t[0])
        if abs(simplex[-1][0] - simplex[0][0]) <= tol * (abs(simplex[0][0]) + tol):
            break
        worst_f, worst = simplex[-1]
        centre = [sum(p[1][k] for p in simplex[:-1]) / d for k in range(d)]

        def towards(t: float, centre: list[float] = centre, worst: list[float] = worst) -> list[float]:
            return clamp([c + t * (c - w) for c, w in zip(centre, worst)])

        fr, xr = ev(towards(1.0))
        if fr < simplex[0][0]:
            fe, xe = ev(towards(2.0))
            simplex[-1] = (fe, xe) if fe < fr else (fr, xr)
        elif fr < simplex[-2][0]:
            simplex[-1] = (fr, xr)
        else:
            fc, xc = ev(towards(0.5 if fr < worst_f else -0.5))
            if fc < min(fr, worst_f):
                simplex[-1] = (fc, xc)
            else:  # shrink towards the best point
                best = simplex[0][1]
                simplex = [simplex[0]] + [ev(clamp([b + 0.5 * (v - b) for b, v in zip(best, p[1])]))
                                          for p in simplex[1:]]
    simplex.sort(key=lambda t: t[0])
    return simplex[0][1], simplex[0][0]
