"""The session: open documents, settings, per-document state and task discovery (ruff's ``session``).

Everything here is touched on the event-loop thread only, except what the scheduler's worker threads
read through ``check_settings`` / ``task_of`` / ``task_target``: task discovery and the reads of task
files happen in those threads, never on the loop (``task`` and ``facts`` await them), and the caches
they fill are guarded by a lock.

Every stored result is keyed by the settings it was computed under (``settings.analysis_key``: target,
API generation, compiler backend, runner): ``set_settings`` drops the results of another key from what is
shown (the kernel report's history keeps them), so a target switch never shows another target's verdict,
figures or diagnostics as current; the scheduler then re-runs what was shown (``Scheduler.settings_changed``).

The agent's verification of a text is kept by the text's SHA-256 (``agent_verified``): when the buffer
becomes that text (Accept of the agent's fix), the document's verify result is the agent's, so the lens
says what the agent just verified instead of "not verified".
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
from collections import deque
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from typing import Any

from ..diagnostics.cost_view import CostView, place
from ..diagnostics.static import Settings as CheckSettings
from ..diagnostics.views.facts import Facts, static_facts
from ..toolchain import taskless
from ..toolchain.protocol.jobs import SimulateResult
from ..toolchain.source_facts import declared_target
from ..toolchain.task_discovery import OutsideTask, inside, outside_task
from . import analysis
from .analysis import RunResult, StaticResult
from .documents import DocumentStore, Snapshot
from .settings import DEFAULTS, ServerSettings, analysis_key
from .tasks import SELF, TaskRef, discover

log = logging.getLogger(__name__)

HISTORY_RUNS = 20  # runs per document kept for the kernel report (each holds its buffer's text)
AGENT_VERIFIED = 8  # texts per document the agent verified, kept until the buffer becomes one of them

Shapes = dict[str, dict[str, tuple[int, ...]]]


@dataclass
class Stats:
    """Counters for tests and benchmarks (``nki/stats``)."""

    published: int = 0
    stale_dropped: int = 0
    static_runs: int = 0
    sim_runs: int = 0
    errors: int = 0
    settings_dropped: int = 0  # results computed under other settings, no longer shown
    debounced: int = 0  # static checks that waited for typing to pause (analysis slower than typing)


@dataclass
class DocState:
    """What the server knows about one open document besides its text."""

    static: StaticResult | None = None
    static_key: tuple[Any, ...] = ()  # the settings the static result was computed under
    runs: dict[str, RunResult] = field(default_factory=dict)  # simulate / verify / remote -> last (current key)
    history: deque[RunResult] = field(default_factory=lambda: deque(maxlen=HISTORY_RUNS))  # kernel report
    facts: tuple[int, str, Facts] | None = None  # (revision, target, facts)
    taskless_facts: tuple[int, taskless.Facts] | None = None  # (revision, what a task-less run would run)
    task: tuple[int, tuple[Any, ...], TaskRef | None] | None = None  # (revision, settings, its task)
    agent_verified: dict[str, RunResult] = field(default_factory=dict)  # sha256(text) -> the agent's verify
    static_cost: float | None = None  # seconds the last static check of this document took
    last_change: float | None = None  # loop time of the last didChange
    typing_gap: float | None = None  # seconds between the last two didChanges


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class Session:
    """Documents, settings, per-document state and task discovery; no LSP, no scheduling."""

    def __init__(self, pool: Executor) -> None:
        self.pool = pool  # the static tier's threads: task discovery and facts run there
        self.store = DocumentStore()
        self.settings: ServerSettings = DEFAULTS
        self.root: str | None = None
        self.roots: list[str] = []  # every workspace folder (tasks and runner files resolve only inside them)
        self.docs: dict[str, DocState] = {}
        self.stats = Stats()
        self.notified: set[str] = set()  # one-time messages already shown
        self._lock = threading.Lock()
        self._outside_logged: set[tuple[str, str]] = set()
        self._task_targets: dict[str, tuple[tuple[int, int], str | None]] = {}  # task path -> (stat, TARGET)

    def doc(self, uri: str) -> DocState:
        return self.docs.setdefault(uri, DocState())

    @property
    def key(self) -> tuple[Any, ...]:
        """The settings every shown result must have been computed under."""
        return analysis_key(self.settings)

    # -- settings ------------------------------------------------------------------------------------
    def set_settings(self, settings: ServerSettings) -> dict[str, set[str]]:
        """Take ``settings``; when what analyses depend on changed, drop every result computed under the old
        ones. Returns uri -> the kinds of runs that were shown and are gone (to run again)."""
        before = self.key
        self.settings = settings
        if analysis_key(settings) == before:
            return {}
        dropped: dict[str, set[str]] = {}
        for uri, st in self.docs.items():
            st.static, st.static_key, st.task = None, (), None
            st.facts = None
            gone = {kind for kind, run in st.runs.items() if run.key != self.key}
            for kind in gone:
                del st.runs[kind]
            self.stats.settings_dropped += len(gone)
            dropped[uri] = gone
        return dropped

    # -- per-document state ------------------------------------------------------------------------------
    def opened(self, snap: Snapshot) -> None:
        self.doc(snap.uri).runs.clear()

    def changed(self, snap: Snapshot, now: float) -> None:
        """A new text: typing pace for the debounce, and the agent's verification if this is its text."""
        st = self.doc(snap.uri)
        if st.last_change is not None:
            st.typing_gap = now - st.last_change
        st.last_change = now
        if st.agent_verified:
            self.adopt_agent_verification(snap)

    def adopt_agent_verification(self, snap: Snapshot) -> bool:
        """If the agent verified exactly this text (under the current settings), it is the document's verify."""
        st = self.doc(snap.uri)
        run = st.agent_verified.get(text_hash(snap.text))
        if run is None or run.key != self.key:
            return False
        st.runs["verify"] = replace(run, revision=snap.revision, version=snap.version)
        st.runs.pop("simulate", None)  # an older simulation of another text would speak for this one
        return True

    def agent_verified(self, uri: str, run: RunResult) -> None:
        """Remember the agent's verification of ``run.text`` (applied later, by ``changed``)."""
        if run.text is None:
            return
        found = self.doc(uri).agent_verified
        if len(found) >= AGENT_VERIFIED:
            found.pop(next(iter(found)))
        found[text_hash(run.text)] = run

    def store_run(self, uri: str, result: RunResult) -> bool:
        """Keep a finished run (history always); False when it is not to be shown: the document is closed or
        the settings changed while it ran."""
        if uri not in self.docs or self.store.get(uri) is None:
            return False
        st = self.doc(uri)
        st.history.append(result)
        if result.key != self.key:
            self.stats.settings_dropped += 1
            return False
        st.runs[result.kind] = result
        return True

    def close(self, uri: str) -> None:
        self.store.close(uri)
        self.docs.pop(uri, None)

    # -- task discovery (worker threads; ``task`` from the loop) ------------------------------------------
    def task_roots(self, snap: Snapshot) -> list[str]:
        """The folders a document's task and the files sent with it must lie in (real paths): the workspace
        folders; for a document outside all of them (or with none open), its own folder."""
        if snap.path and any(inside(snap.path, [r]) for r in self.roots):
            return list(self.roots)
        folder = os.path.dirname(os.path.abspath(snap.path)) if snap.path else ""
        return [folder] if folder else []

    def task_of(self, snap: Snapshot) -> TaskRef | None:
        """The document's task (reads the file system: call it in a worker thread, or ``await task``)."""
        roots = self.task_roots(snap)
        ref = discover(snap.path, snap.text, dict(self.settings.task_map), self.root, roots)
        if ref is None or ref.how in ("self", "sibling"):
            out = self.outside_of(snap)
            if out is not None:
                with self._lock:
                    first = (snap.uri, out.real) not in self._outside_logged
                    self._outside_logged.add((snap.uri, out.real))
                if first:
                    log.warning("%s: the task named by %s (%s -> %s) is outside the workspace folders %s; ignored",
                                snap.path, out.how, out.written, out.real, roots)
        return ref

    async def task(self, snap: Snapshot) -> TaskRef | None:
        """``task_of`` computed off the event loop, once per revision and settings."""
        st = self.doc(snap.uri)
        key = (self.key, self.settings.task_map, tuple(self.roots))
        if st.task is not None and st.task[0] == snap.revision and st.task[1] == key:
            return st.task[2]
        ref = await asyncio.get_running_loop().run_in_executor(self.pool, self.task_of, snap)
        if self.store.is_current(snap):
            st.task = (snap.revision, key, ref)
        return ref

    def outside_of(self, snap: Snapshot) -> OutsideTask | None:
        """The task file discovery ignored for ``snap`` because it is outside the workspace (None: none)."""
        if snap.too_large or not snap.path:
            return None
        return outside_task(snap.path, snap.text, dict(self.settings.task_map), self.root, self.task_roots(snap))

    def task_target(self, snap: Snapshot) -> str | None:
        """The ``TARGET`` the document's task declares (None: none, or ``nkiAgent.target`` is set): the
        simulation runs on it, so the static check and the hovers use it too. Task files are read once per
        change on disk (size and mtime). Reads files: worker threads only."""
        if self.settings.target != "auto" or snap.too_large:
            return None
        task = self.task_of(snap)
        if task is None:
            return None
        if task.path == SELF:
            return declared_target(snap.text)
        try:
            st = os.stat(task.path)
        except OSError:
            return None
        key = (st.st_mtime_ns, st.st_size)
        with self._lock:
            hit = self._task_targets.get(task.path)
        if hit is not None and hit[0] == key:
            return hit[1]
        try:
            with open(task.path, encoding="utf-8", errors="replace") as fh:
                found = declared_target(fh.read(1 << 20))
        except OSError:
            return None
        with self._lock:
            if len(self._task_targets) > 256:
                self._task_targets.clear()
            self._task_targets[task.path] = (key, found)
        return found

    def check_settings(self, snap: Snapshot, input_shapes: Shapes | None = None) -> CheckSettings:
        """The static check's settings for ``snap`` (its task's target included; worker threads only)."""
        return analysis.check_settings(self.settings, input_shapes, self.task_target(snap))

    async def check_settings_async(self, snap: Snapshot, input_shapes: Shapes | None = None) -> CheckSettings:
        return await asyncio.get_running_loop().run_in_executor(self.pool, self.check_settings, snap, input_shapes)

    # -- what the last runs tell about the current text ---------------------------------------------------
    def input_shapes(self, snap: Snapshot, facts: Facts | None = None) -> Shapes:
        """kernel -> param -> shape from the last simulation's inputs (a task's, or each kernel a task-less
        run launched: its first launch)."""
        st = self.docs.get(snap.uri)
        run = (st.runs.get("simulate") or st.runs.get("verify")) if st is not None else None
        return input_shapes(run, facts)

    def cost_view(self, snap: Snapshot) -> CostView | None:
        """The cost model's estimate from the document's newest local run that has one (verify or simulate;
        verify on a tie), placed on the current text: its lines follow the edits made since that run, lines
        that were edited lose their figures, and it says so (``stale``). None without one."""
        st = self.docs.get(snap.uri)
        runs = [r for r in (st.runs.get("verify"), st.runs.get("simulate"))
                if r is not None and r.result.estimate is not None] if st else []
        if not runs:
            return None
        last = max(runs, key=lambda r: r.revision)
        assert last.result.estimate is not None
        ran_on = snap.text if last.revision == snap.revision else last.text
        kernel = last.result.kernel_name if isinstance(last.result, SimulateResult) else ""
        return place(last.result.estimate, snap.text, ran_on, kernel)

    def cached_facts(self, snap: Snapshot) -> Facts | None:
        st = self.docs.get(snap.uri)
        return st.facts[2] if st and st.facts and st.facts[0] == snap.revision else None

    async def facts(self, snap: Snapshot) -> Facts:
        """The static facts of ``snap`` (tensors, kernels, loops) for the target it is checked against."""
        st = self.doc(snap.uri)
        if st.facts and st.facts[0] == snap.revision:
            return st.facts[2]
        if snap.too_large:
            return Facts()

        def compute() -> tuple[str, Facts]:
            target = self.check_settings(snap).target
            return target, static_facts(snap.text, target, {})

        target, f = await asyncio.get_running_loop().run_in_executor(self.pool, compute)
        if self.store.is_current(snap):
            st.facts = (snap.revision, target, f)
        return f

    async def taskless_facts(self, snap: Snapshot) -> taskless.Facts:
        """What a task-less run of ``snap`` would run (its ``__main__``, tests, shape lines), for the code lens
        and the "Add input shapes" action; computed off the event loop (test discovery reads the workspace)."""
        st = self.doc(snap.uri)
        if st.taskless_facts is not None and st.taskless_facts[0] == snap.revision:
            return st.taskless_facts[1]
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(self.pool, taskless.read_facts, snap.path, snap.text, self.root)
        if self.store.is_current(snap):
            st.taskless_facts = (snap.revision, found)
        return found


def input_shapes(run: RunResult | None, facts: Facts | None) -> Shapes:
    """kernel -> param -> shape from a run's inputs (each kernel a task-less run launched: its first launch)."""
    sim = run.result if run is not None and isinstance(run.result, SimulateResult) else None
    if sim is None or facts is None or not facts.kernels:
        return {}
    launched = [(launch.kernel_name, launch.inputs) for launch in sim.launches]
    if not launched and sim.inputs:
        launched = [(sim.kernel_name, sim.inputs)]
    out: Shapes = {}
    for name, inputs in launched:
        kernel = next((k for k in facts.kernels if k.name == name), None)
        if kernel is None and not sim.launches:
            kernel = facts.kernels[0]
        if kernel is None or kernel.name in out:
            continue
        out[kernel.name] = {param: tuple(spec.shape) for (param, _, _), spec in zip(kernel.params, inputs)
                            if spec.shape is not None}
    return out
