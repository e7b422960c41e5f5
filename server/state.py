"""Server state and scheduling: open documents, settings, analysis results, and when to publish.

Concurrency model (ruff's, in asyncio): the document store and every dict here are touched only on
the event-loop thread; analyses get an immutable ``Snapshot`` and run in thread pools (one for the
fast static tier, one for sandboxed simulations). Each change bumps the document's ``revision``; a
debounced static check runs ``debounce_ms`` after the last change, and any result is published only
if its snapshot is still the current revision — a result computed for an older version is never
published. Published diagnostics are the union of the tiers computed for the current revision.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lsprotocol import types as T

from ..diagnostics.cost_view import CostView, place
from ..diagnostics import suppress
from ..diagnostics.model import Diagnostic, dedupe
from ..toolchain import taskless
from nki_agent.toolchain.facts.errors import doc_url
from nki_agent.toolchain.protocol.jobs import SimulateResult
from ..toolchain.source_facts import declared_target
from ..toolchain.task_discovery import OutsideTask, inside, missing_task, outside_task
from . import analysis
from ..diagnostics.static import Settings as CheckSettings
from .analysis import RunResult, StaticResult
from .convert import file_uri, to_lsp_diagnostic
from .documents import DocumentStore, Snapshot, uri_to_path
from .facts import Facts, static_facts
from .remote import Remote
from .settings import DEFAULTS, ServerSettings
from .tasks import SELF, TaskRef, discover

if TYPE_CHECKING:
    from .app import NkiLanguageServer

log = logging.getLogger(__name__)


def missing_task_diagnostic(snap: Snapshot) -> Diagnostic | None:
    """A ``# nki-task:`` comment naming a file that is not there: say which path was looked for."""
    if snap.too_large:
        return None
    m = missing_task(snap.path, snap.text)
    if m is None:
        return None
    return Diagnostic("sim_task_not_found", "warning",
                      f"`# nki-task:` names `{m.written}`, which does not exist (looked for {m.looked_for}); "
                      "saving cannot simulate or verify against it", snap.path, m.line, m.column, m.line,
                      m.column + len(m.written), "nki-agent", doc_url("sim_task_not_found"))


def outside_task_diagnostic(snap: Snapshot, out: OutsideTask | None) -> Diagnostic | None:
    """A ``# nki-task:`` comment naming a file outside the workspace folders: ignored, and said so at the path."""
    if out is None or out.how != "comment":
        return None
    return Diagnostic("sim_task_not_found", "warning",
                      f"`# nki-task:` names `{out.written}`, which is outside the workspace folders ({out.real}); "
                      "it is ignored: tasks are read only inside the workspace", snap.path, out.line, out.column,
                      out.line, out.column + len(out.written), "nki-agent", doc_url("sim_task_not_found"))


HISTORY_RUNS = 20  # runs per document kept for the kernel report (each holds its buffer's text)


@dataclass
class Stats:
    """Counters for tests and benchmarks (``nki/stats``)."""

    published: int = 0
    stale_dropped: int = 0
    static_runs: int = 0
    sim_runs: int = 0
    errors: int = 0


@dataclass
class DocState:
    static: StaticResult | None = None
    runs: dict[str, RunResult] = field(default_factory=dict)  # simulate / verify -> last result (any revision)
    history: deque[RunResult] = field(default_factory=lambda: deque(maxlen=HISTORY_RUNS))  # kernel report
    pending: asyncio.Task[None] | None = None
    facts: tuple[int, str, Facts] | None = None  # (revision, target, facts)
    taskless_facts: tuple[int, taskless.Facts] | None = None  # (revision, what a task-less run would run)


class ServerState:
    def __init__(self, server: NkiLanguageServer) -> None:
        self.server = server
        self.store = DocumentStore()
        self.settings: ServerSettings = DEFAULTS
        self.root: str | None = None
        self.roots: list[str] = []  # every workspace folder (tasks and runner files resolve only inside them)
        self._outside_logged: set[tuple[str, str]] = set()
        self.docs: dict[str, DocState] = {}
        self.stats = Stats()
        self.static_pool = ThreadPoolExecutor(2, thread_name_prefix="nki-static")
        self.run_pool = ThreadPoolExecutor(2, thread_name_prefix="nki-run")
        self.notified: set[str] = set()  # one-time messages already shown
        self.remote = Remote(self)
        self._task_targets: dict[str, tuple[tuple[int, int], str | None]] = {}  # task path -> (stat, TARGET)
        self._published: dict[str, tuple[int, list[T.Diagnostic]]] = {}  # uri -> the last publish (version, diags)

    # -- helpers ---------------------------------------------------------------------------------
    def doc(self, uri: str) -> DocState:
        return self.docs.setdefault(uri, DocState())

    def show_once(self, key: str, message: str, kind: T.MessageType = T.MessageType.Info) -> None:
        if key in self.notified:
            return
        self.notified.add(key)
        self.server.window_show_message(T.ShowMessageParams(type=kind, message=message))

    def task_roots(self, snap: Snapshot) -> list[str]:
        """The folders a document's task and the files sent with it must lie in (real paths): the workspace
        folders; for a document outside all of them (or with none open), its own folder."""
        if snap.path and any(inside(snap.path, [r]) for r in self.roots):
            return list(self.roots)
        folder = os.path.dirname(os.path.abspath(snap.path)) if snap.path else ""
        return [folder] if folder else []

    def task_of(self, snap: Snapshot) -> TaskRef | None:
        roots = self.task_roots(snap)
        task_map = dict(self.settings.task_map)
        ref = discover(snap.path, snap.text, task_map, self.root, roots)
        if ref is None or ref.how in ("self", "sibling"):
            out = self.outside_of(snap)
            if out is not None and (snap.uri, out.real) not in self._outside_logged:
                self._outside_logged.add((snap.uri, out.real))
                log.warning("%s: the task named by %s (%s -> %s) is outside the workspace folders %s; ignored",
                            snap.path, out.how, out.written, out.real, roots)
        return ref

    def outside_of(self, snap: Snapshot) -> OutsideTask | None:
        """The task file discovery ignored for ``snap`` because it is outside the workspace (None: none)."""
        if snap.too_large or not snap.path:
            return None
        return outside_task(snap.path, snap.text, dict(self.settings.task_map), self.root, self.task_roots(snap))

    def task_target(self, snap: Snapshot) -> str | None:
        """The ``TARGET`` the document's task declares (None: none, or ``nkiAgent.target`` is set): the
        simulation runs on it, so the static check and the hovers use it too. Task files are read once per
        change on disk (size and mtime)."""
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
        hit = self._task_targets.get(task.path)
        if hit is not None and hit[0] == key:
            return hit[1]
        try:
            with open(task.path, encoding="utf-8", errors="replace") as fh:
                found = declared_target(fh.read(1 << 20))
        except OSError:
            return None
        if len(self._task_targets) > 256:
            self._task_targets.clear()
        self._task_targets[task.path] = (key, found)
        return found

    def check_settings(self, snap: Snapshot, input_shapes: dict[str, dict[str, tuple[int, ...]]] | None = None
                       ) -> CheckSettings:
        """The static check's settings for ``snap`` (its task's target included)."""
        return analysis.check_settings(self.settings, input_shapes, self.task_target(snap))

    def input_shapes(self, snap: Snapshot, facts: Facts | None = None) -> dict[str, dict[str, tuple[int, ...]]]:
        """kernel -> param -> shape from the last simulation's inputs (a task's, or each kernel a task-less
        run launched: its first launch)."""
        st = self.docs.get(snap.uri)
        run = (st.runs.get("simulate") or st.runs.get("verify")) if st is not None else None
        sim = run.result if run is not None and isinstance(run.result, SimulateResult) else None
        if sim is None or facts is None or not facts.kernels:
            return {}
        launched = [(launch.kernel_name, launch.inputs) for launch in sim.launches]
        if not launched and sim.inputs:
            launched = [(sim.kernel_name, sim.inputs)]
        out: dict[str, dict[str, tuple[int, ...]]] = {}
        for name, inputs in launched:
            kernel = next((k for k in facts.kernels if k.name == name), None)
            if kernel is None and not sim.launches:
                kernel = facts.kernels[0]
            if kernel is None or kernel.name in out:
                continue
            out[kernel.name] = {param: tuple(spec.shape) for (param, _, _), spec in zip(kernel.params, inputs)
                                if spec.shape is not None}
        return out

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

    # -- static tier -----------------------------------------------------------------------------
    def schedule_static(self, snap: Snapshot, delay: float | None = None, only_if_changed: bool = False) -> None:
        """Check ``snap`` after ``delay`` (default: the debounce) and publish; ``only_if_changed``: stay
        quiet when the diagnostics come out as already published (the re-check after a run)."""
        st = self.doc(snap.uri)
        if st.pending is not None and not st.pending.done():
            st.pending.cancel()
        wait = self.settings.debounce_ms / 1000 if delay is None else delay
        st.pending = asyncio.ensure_future(self._static_after(snap, wait, only_if_changed))

    async def _static_after(self, snap: Snapshot, delay: float, only_if_changed: bool = False) -> None:
        try:
            if delay > 0:
                await asyncio.sleep(delay)
            if not self.store.is_current(snap):
                return
            settings = self.check_settings(snap, self.input_shapes(snap, self._cached_facts(snap)))
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(self.static_pool, analysis.static, snap, settings)
            self.stats.static_runs += 1
        except asyncio.CancelledError:
            return
        except Exception:  # an analysis bug costs one log line, never the server
            log.exception("static analysis failed for %s", snap.uri)
            self.stats.errors += 1
            return
        if not self.store.is_current(snap):
            self.stats.stale_dropped += 1
            return
        self.doc(snap.uri).static = result
        self.publish(snap.uri, only_if_changed)

    # -- simulation / verification tier ----------------------------------------------------------
    async def run(self, kind: str, snap: Snapshot, task: TaskRef) -> RunResult | None:
        """Simulate or verify ``snap`` in the sandbox; publish if still current."""
        return await self._execute(kind, snap, lambda stop: analysis.run(kind, snap, task, self.settings, stop))

    async def run_taskless(self, snap: Snapshot) -> RunResult | None:
        """Simulate ``snap``, a kernel with no task, in the sandbox all the same (its ``__main__`` driver, a
        pytest test of the workspace, its shape lines: ``toolchain.taskless``); publish if still current."""
        return await self._execute("simulate", snap,
                                   lambda stop: analysis.run_taskless(snap, self.settings, self.root, stop))

    async def _execute(self, kind: str, snap: Snapshot, job: Callable[[threading.Event], RunResult]) -> RunResult | None:
        loop = asyncio.get_running_loop()
        stop = threading.Event()
        try:
            result = await loop.run_in_executor(self.run_pool, job, stop)
            self.stats.sim_runs += 1
        except asyncio.CancelledError:
            stop.set()  # the sandboxed worker is killed, not left running for a result nobody wants
            return None
        except Exception:
            log.exception("%s failed for %s", kind, snap.uri)
            self.stats.errors += 1
            return None
        if snap.uri not in self.docs or self.store.get(snap.uri) is None:
            return result
        self.doc(snap.uri).runs[kind] = result
        self.doc(snap.uri).history.append(result)
        if self.store.is_current(snap):
            self.publish(snap.uri)
            if isinstance(result.result, SimulateResult) and (result.result.inputs or result.result.launches):
                # the inputs make the static checks rank-aware; a save still publishes once unless that
                # re-check finds something new
                self.schedule_static(snap, 0, only_if_changed=True)
        else:
            self.stats.stale_dropped += 1
        return result

    def on_save(self, snap: Snapshot) -> None:
        """simulate (or verify, ``verifyOnSave`` local / remote) the saved revision; ``remote`` also sends
        it to the runner (the local run still gives hovers their trace and flags a disagreement). A kernel
        with no task is simulated all the same (``run_taskless``): verification needs a task."""
        if snap.too_large:
            return
        mode = self.settings.verify_on_save
        if not (self.settings.simulate_on_save or mode != "off"):
            return
        task = self.task_of(snap)
        if task is None:
            asyncio.ensure_future(self._taskless_and_refresh(snap))
            return
        if mode == "remote" and not self.settings.runner_url:
            self.show_once("runner-url", 'NKI Agent: verifyOnSave is "remote" but nkiAgent.runnerUrl is empty; '
                           "verifying with the embedded simulator.", T.MessageType.Warning)
        kind = "verify" if mode != "off" else "simulate"
        asyncio.ensure_future(self._run_and_refresh(kind, snap, task))
        if mode == "remote" and self.settings.runner_url:
            asyncio.ensure_future(self.remote.run(snap, task))

    async def _taskless_and_refresh(self, snap: Snapshot) -> None:
        if await self.run_taskless(snap) is not None:
            self.refresh_lenses()  # the lens says what ran

    async def taskless_facts(self, snap: Snapshot) -> taskless.Facts:
        """What a task-less run of ``snap`` would run (its ``__main__``, tests, shape lines), for the code lens
        and the "Add input shapes" action; computed off the event loop (test discovery reads the workspace)."""
        st = self.doc(snap.uri)
        if st.taskless_facts is not None and st.taskless_facts[0] == snap.revision:
            return st.taskless_facts[1]
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(self.static_pool, taskless.read_facts, snap.path, snap.text, self.root)
        if self.store.is_current(snap):
            st.taskless_facts = (snap.revision, found)
        return found

    async def _run_and_refresh(self, kind: str, snap: Snapshot, task: TaskRef) -> None:
        result = await self.run(kind, snap, task)
        if result is not None and kind == "verify":
            self.refresh_lenses()

    def refresh_lenses(self) -> None:
        caps = self.server.client_capabilities.workspace
        if caps and caps.code_lens and caps.code_lens.refresh_support:
            self.server.workspace_code_lens_refresh(None)

    # -- facts (hover, inlay hints) -------------------------------------------------------------------
    def _cached_facts(self, snap: Snapshot) -> Facts | None:
        st = self.docs.get(snap.uri)
        return st.facts[2] if st and st.facts and st.facts[0] == snap.revision else None

    async def facts(self, snap: Snapshot) -> Facts:
        st = self.doc(snap.uri)
        target = self.check_settings(snap).target
        if st.facts and st.facts[0] == snap.revision and st.facts[1] == target:
            return st.facts[2]
        if snap.too_large:
            return Facts()
        loop = asyncio.get_running_loop()
        f = await loop.run_in_executor(self.static_pool, static_facts, snap.text, target, {})
        if self.store.is_current(snap):
            st.facts = (snap.revision, target, f)
        return f

    # -- publishing ---------------------------------------------------------------------------------
    def current_diagnostics(self, uri: str) -> tuple[Snapshot | None, list[tuple[str, int, Any]]]:
        """(snapshot, [(tier, index, model diagnostic)]) computed for the current revision."""
        snap = self.store.get(uri)
        st = self.docs.get(uri)
        if snap is None or st is None:
            return snap, []
        out: list[tuple[str, int, Any]] = []
        if st.static is not None and st.static.revision == snap.revision:
            out.extend(("static", k, d) for k, d in enumerate(st.static.diagnostics))
        for kind, run in st.runs.items():
            if run.revision == snap.revision:
                out.extend((kind, k, d) for k, d in enumerate(run.diagnostics))
        missing = missing_task_diagnostic(snap) or outside_task_diagnostic(snap, self.outside_of(snap))
        if missing is not None:
            out.append(("task", 0, missing))
        local, remote = st.runs.get("verify"), st.runs.get("remote")
        if local is not None and remote is not None and local.revision == remote.revision == snap.revision:
            differ = analysis.disagreement(local, remote, snap, remote.result.runner)
            if differ is not None:
                out.append(("remote", len(remote.diagnostics), differ))
        # the local tiers (static, simulate, verify) publish one diagnostic per problem; the runner's own stay
        # (another machine's verdict, source nki-runner)
        local_tiers = dedupe([t for t in out if t[0] != "remote"])
        # what the user hid (`# nki: ignore[...]`) or re-graded (nkiAgent.severity), every tier at once
        return snap, suppress.apply_tagged(local_tiers + [t for t in out if t[0] == "remote"], snap.text, snap.path,
                                           self.settings.severity)

    def path_to_uri(self, uri: str, path: str) -> str | None:
        if not path:
            return uri
        if os.path.abspath(path) == os.path.abspath(uri_to_path(uri)):
            return uri
        return file_uri(os.path.abspath(path))

    def lsp_diagnostics(self, uri: str) -> tuple[Snapshot | None, list[T.Diagnostic]]:
        snap, diags = self.current_diagnostics(uri)
        if snap is None:
            return None, []
        lines = snap.text.split("\n")
        to_uri: Callable[[str], str | None] = lambda p: self.path_to_uri(uri, p)
        return snap, [to_lsp_diagnostic(d, lines, uri, to_uri, {"tier": tier, "index": k, "revision": snap.revision})
                      for tier, k, d in diags]

    def publish(self, uri: str, only_if_changed: bool = False) -> None:
        snap, diags = self.lsp_diagnostics(uri)
        if snap is None:
            return
        last = (snap.version, diags)
        if only_if_changed and self._published.get(uri) == last:
            return
        self._published[uri] = last
        self.server.text_document_publish_diagnostics(
            T.PublishDiagnosticsParams(uri=uri, diagnostics=diags, version=snap.version))
        self.stats.published += 1

    def clear(self, uri: str) -> None:
        self._published.pop(uri, None)
        st = self.docs.pop(uri, None)
        if st is not None and st.pending is not None:
            st.pending.cancel()
        self.server.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
