"""Custom request ``nki/kernelReport {uri}``: a document's run history as one typed model, for the
VS Code extension's kernel report (a webview that draws it).

The model (``KernelReport``, sent as plain JSON) holds, newest run first and at most
``state.HISTORY_RUNS`` of them: each simulation / verification / remote runner job of the document —
its verdict (correct / incorrect / did not compile / simulated / failed), error figures, per-seed
figures, the problem codes, the latency a device MEASURED (a remote runner's profile) and the latency
the cost model ESTIMATED, each in its own field, never one number for both. Also the newest estimate's
engine timeline as SVG (``cli/timeline_svg.render``: self-contained, every string XML-escaped) and, for
the newest failing verification, what the toolchain reports about its mismatches: per seed the
mismatched / total element counts and the first mismatched element (output, index, partition, free
offset, got, expected, line). Per-element mismatch maps are not in the toolchain's protocol.
An unknown or closed document is a JSON-RPC error.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ...cli import timeline_svg
from ...toolchain.protocol import ProfileResult, SimulateResult, VerifyResult
from ...toolchain.protocol_cost import CostEstimate
from ..tasks import SELF

if TYPE_CHECKING:
    from ..analysis import RunResult
    from ..app import NkiLanguageServer

KERNEL_REPORT = "nki/kernelReport"
MAX_SEEDS = 16  # per-seed rows of one run in the report
MAX_CODES = 20
MAX_TEXT = 300  # characters of a message from the toolchain


def _num(x: float | None) -> float | None:
    """JSON has no inf/NaN: such figures are reported as None (the verdict still says incorrect)."""
    return x if x is not None and math.isfinite(x) else None


def _clip(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class FirstMismatch:
    output: int
    index: list[int]
    partition: int  # index[0]: the partition axis of an NKI output
    free: list[int]  # the remaining indices
    got: float | None
    expected: float | None
    line: int | None


@dataclass(frozen=True)
class SeedRow:
    seed: int | None  # None for a hidden seed (its number is never reported)
    hidden: bool
    correct: bool
    max_abs_error: float | None
    max_rel_error: float | None
    mismatches: int
    elements: int
    first_mismatch: FirstMismatch | None
    message: str


@dataclass(frozen=True)
class Latency:
    microseconds: float
    source: str  # measured: "nki.benchmark", ...; estimated: "cost model"
    target: str
    detail: str  # p99 of a measurement, what bounds an estimate


@dataclass(frozen=True)
class RunEntry:
    kind: str  # simulate | verify | remote
    revision: int
    version: int
    verdict: str  # correct | incorrect | did not compile | simulated | failed
    correct: bool | None  # None: a simulation has no verdict against a reference
    target: str
    backend: str
    runner: str
    sandbox: str
    via: str
    max_abs_error: float | None
    max_rel_error: float | None
    mismatches: int
    elements: int
    atol: float
    rtol: float
    codes: list[str]
    seeds: list[SeedRow]
    measured: Latency | None  # a device's measurement (a remote runner's profile); never the cost model's
    estimated: Latency | None  # the cost model's estimate; never a measurement
    seconds: float


@dataclass(frozen=True)
class KernelReport:
    uri: str
    path: str
    version: int
    task: str
    runs: list[RunEntry] = field(default_factory=list)  # newest first
    timeline_svg: str = ""  # the newest estimate's engine timeline ("" when no run has one)
    timeline_of: int | None = None  # the revision whose estimate the timeline shows
    mismatch_of: int | None = None  # index into ``runs`` of the newest failing verification

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _first(m: Any) -> FirstMismatch | None:
    if m is None:
        return None
    idx = [int(i) for i in m.index]
    return FirstMismatch(m.output, idx, idx[0] if idx else 0, idx[1:], _num(m.got), _num(m.expected), m.line)


def _estimated(est: CostEstimate | None) -> Latency | None:
    if est is None or not math.isfinite(est.latency_us):
        return None
    return Latency(est.latency_us, "cost model", est.target, f"{est.bound}-bound")


def _measured(res: VerifyResult | SimulateResult) -> Latency | None:
    if not isinstance(res, ProfileResult) or res.latency.kind != "measured" or res.latency.p50_us is None:
        return None
    lat = res.latency
    detail = f"p99 {lat.p99_us:.1f} µs, {lat.iterations} iterations" if lat.p99_us is not None else ""
    return Latency(lat.p50_us, _clip(lat.source or "device"), lat.target or res.target, detail)


def entry(run: RunResult) -> RunEntry:
    """One run of the history as the report shows it."""
    res = run.result
    codes = sorted({d.code for d in run.diagnostics})[:MAX_CODES]
    if isinstance(res, VerifyResult):
        correct: bool | None = res.correct
        verdict = "correct" if res.correct else "incorrect" if res.compiled else "did not compile"
        seeds = [SeedRow(s.seed if not s.hidden else None, s.hidden, s.correct, _num(s.max_abs_error),
                         _num(s.max_rel_error), s.mismatches, s.elements, _first(s.first_mismatch),
                         _clip(s.message)) for s in res.seeds[:MAX_SEEDS]]
        figures = (_num(res.max_abs_error), _num(res.max_rel_error), res.mismatches,
                   sum(s.elements for s in res.seeds), res.atol, res.rtol)
    else:
        correct, seeds = None, []
        verdict = "simulated" if res.ran and not codes else "failed"
        figures = (None, None, 0, 0, 0.0, 0.0)
    return RunEntry(run.kind, run.revision, run.version, verdict, correct, res.target, res.backend, _clip(res.runner),
                    res.sandbox, run.via, *figures, codes, seeds, _measured(res), _estimated(res.estimate),
                    res.seconds)


def report(uri: str, path: str, version: int, task: str, history: list[RunResult]) -> KernelReport:
    """The report of a document whose runs (oldest first) are ``history``."""
    newest = list(reversed(history))
    runs = [entry(r) for r in newest]
    svg, of = "", None
    for r in newest:
        est = r.result.estimate
        if est is not None and est.timeline:
            svg = timeline_svg.render(est, f"revision {r.revision} ({r.kind})")
            of = r.revision
            break
    mismatch_of = next((i for i, e in enumerate(runs) if e.correct is False and e.seeds), None)
    return KernelReport(uri, path, version, task, runs, svg, of, mismatch_of)


def _get(params: Any, key: str) -> Any:
    if isinstance(params, dict):
        return params.get(key)
    return getattr(params, key, None)


def register(ls: NkiLanguageServer) -> None:
    @ls.feature(KERNEL_REPORT)
    def kernel_report(ls: NkiLanguageServer, params: Any) -> dict[str, Any]:
        uri = _get(params, "uri")
        snap = ls.state.store.get(uri) if isinstance(uri, str) else None
        if snap is None:
            raise ValueError(f"{KERNEL_REPORT} needs the URI of an open document")
        task = ls.state.task_of(snap)
        st = ls.state.docs.get(snap.uri)
        history = list(st.history) if st is not None else []
        task_path = "" if task is None else snap.path if task.path == SELF else task.path
        return report(snap.uri, snap.path, snap.version, task_path, history).to_json()
