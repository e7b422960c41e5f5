"""Custom request ``nki/kernelReport {uri}``: a document's run history as one typed model, for the
VS Code extension's kernel report (a webview that draws it).

The model (``KernelReport``, sent as plain JSON) holds, newest run first and at most
``session.HISTORY_RUNS`` of them: each simulation / verification / remote runner job of the document —
its verdict (correct / incorrect / did not compile / simulated / failed), error figures, per-seed
figures, the problem codes, the latency a device MEASURED (a remote runner's profile) and the latency
the cost model ESTIMATED, each in its own field, never one number for both. Also the newest estimate's
engine timeline as SVG (``cli/timeline_svg.render``: self-contained, every string XML-escaped) and, for
the newest failing verification, what the toolchain reports about its mismatches: per seed the
mismatched / total element counts, the first mismatched element (output, index, partition, free
offset, got, expected, line) and its output's mismatch map (counts over at most 16 partition bins x
32 free bins: ``toolchain.verify.mismatch_map``; hidden seeds carry none).
An unknown or closed document is a JSON-RPC error.

The estimates of on-save runs carry no timeline (it is large); ``{uri, timeline: true}`` (the report
opened by the user) has the cost model estimate the buffer with its timeline when no run of the history
has one (``toolchain.api.estimate``, a trace-only run in the sandbox, in the run pool), once per
revision; a later request without the flag reuses it, labelled with the revision it was computed on.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from nki_agent.toolchain.protocol.cost import CostEstimate
from nki_agent.toolchain.protocol.jobs import ProfileResult, SimulateResult, VerifyResult

from ...cli import timeline_svg
from ...toolchain import api
from ..tasks import SELF

if TYPE_CHECKING:
    from ..analysis import RunResult
    from ..app import NkiLanguageServer
    from ..documents import Snapshot
    from ..tasks import TaskRef

log = logging.getLogger(__name__)

KERNEL_REPORT = "nki/kernelReport"
MAX_SEEDS = 16  # per-seed rows of one run in the report
MAX_CODES = 20
MAX_TEXT = 300  # characters of a message from the toolchain
MAX_TIMELINES = 16  # documents whose computed timeline is kept
_timelines: dict[str, tuple[int, int, str]] = {}  # uri -> (revision, version, the timeline SVG computed on it)


def _num(x: float | None) -> float | None:
    """JSON has no inf/NaN: such figures are reported as None (the verdict still says incorrect)."""
    return x if x is not None and math.isfinite(x) else None


def _clip(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class Heatmap:
    """Mismatched elements of one output per bin: bin (i, j) covers partitions row_starts[i].. and free
    elements col_starts[j].. (to the next start, or the end)."""

    partitions: int
    free: int
    row_starts: list[int]
    col_starts: list[int]
    counts: list[list[int]]


@dataclass(frozen=True)
class FirstMismatch:
    output: int
    index: list[int]
    partition: int  # index[0]: the partition axis of an NKI output
    free: list[int]  # the remaining indices
    got: float | None
    expected: float | None
    line: int | None
    heatmap: Heatmap | None = None


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
    timeline_of: int | None = None  # the document version whose estimate the timeline shows
    mismatch_of: int | None = None  # index into ``runs`` of the newest failing verification

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _first(m: Any) -> FirstMismatch | None:
    if m is None:
        return None
    idx = [int(i) for i in m.index]
    hm = m.map
    heat = None if hm is None else Heatmap(hm.partitions, hm.free, list(hm.row_starts), list(hm.col_starts),
                                             [list(r) for r in hm.counts])
    return FirstMismatch(m.output, idx, idx[0] if idx else 0, idx[1:], _num(m.got), _num(m.expected), m.line, heat)


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


def report(uri: str, path: str, version: int, task: str, history: list[RunResult],
           computed: tuple[int, int, str] | None = None) -> KernelReport:
    """The report of a document whose runs (oldest first) are ``history``; ``computed``: a timeline the
    report estimated itself (revision, version, SVG), used when it is newer than every run's."""
    newest = list(reversed(history))
    runs = [entry(r) for r in newest]
    svg, of, of_revision = "", None, -1
    for r in newest:
        est = r.result.estimate
        if est is not None and est.timeline:
            svg = timeline_svg.render(est, f"version {r.version} ({r.kind})")
            of, of_revision = r.version, r.revision
            break
    if computed is not None and computed[0] > of_revision:
        _, of, svg = computed
    mismatch_of = next((i for i, e in enumerate(runs) if e.correct is False and e.seeds), None)
    return KernelReport(uri, path, version, task, runs, svg, of, mismatch_of)


def estimate_timeline(snap: Snapshot, task: TaskRef, target: str | None, timeout: float) -> str:
    """The cost model's timeline of the buffer (a trace-only run in the sandbox), as SVG; "" when the
    kernel does not run or the model has no estimate."""
    tmpdir = tempfile.mkdtemp(prefix="nki-agent-report-")
    try:
        kernel = os.path.join(tmpdir, os.path.basename(snap.path) or "kernel.py")
        with open(kernel, "w", encoding="utf-8", errors="surrogatepass") as fh:
            fh.write(snap.text)
        folder = os.path.dirname(snap.path)
        search = [folder] if folder and os.path.isdir(folder) else []
        res = api.estimate(kernel, kernel if task.path == SELF else task.path, target=target, timeline=True,
                           timeout=timeout, search_path=search)
        est = res.estimate
        return timeline_svg.render(est, f"version {snap.version} (estimated for the report)") \
            if est is not None and est.timeline else ""
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


async def _timeline(ls: NkiLanguageServer, snap: Snapshot, task: TaskRef) -> tuple[int, int, str] | None:
    done = _timelines.get(snap.uri)
    if done is not None and done[0] == snap.revision:
        return done
    s = ls.session.settings
    target = None if s.target == "auto" else s.target
    try:
        svg = await asyncio.get_running_loop().run_in_executor(
            ls.scheduler.run_pool, estimate_timeline, snap, task, target, s.simulation_timeout)
    except Exception:
        log.exception("kernel report: estimating the timeline of %s failed", snap.uri)
        return done
    if not svg:
        return done
    _timelines.pop(snap.uri, None)
    _timelines[snap.uri] = (snap.revision, snap.version, svg)
    while len(_timelines) > MAX_TIMELINES:
        del _timelines[next(iter(_timelines))]
    return _timelines[snap.uri]


def _get(params: Any, key: str) -> Any:
    if isinstance(params, dict):
        return params.get(key)
    return getattr(params, key, None)


def register(ls: NkiLanguageServer) -> None:
    @ls.feature(KERNEL_REPORT)
    async def kernel_report(ls: NkiLanguageServer, params: Any) -> dict[str, Any]:
        uri = _get(params, "uri")
        snap = ls.session.store.get(uri) if isinstance(uri, str) else None
        if snap is None:
            raise ValueError(f"{KERNEL_REPORT} needs the URI of an open document")
        task = await ls.session.task(snap)
        st = ls.session.docs.get(snap.uri)
        history = list(st.history) if st is not None else []
        has_timeline = any(r.result.estimate is not None and r.result.estimate.timeline for r in history)
        computed = _timelines.get(snap.uri)
        if _get(params, "timeline") is True and task is not None and not has_timeline and not snap.too_large:
            computed = await _timeline(ls, snap, task)
        task_path = "" if task is None else snap.path if task.path == SELF else task.path
        return report(snap.uri, snap.path, snap.version, task_path, history, computed).to_json()
