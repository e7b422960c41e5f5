"""The scheduler: named tasks for the static and run tiers; nothing blocks the event loop (ruff's scheduler).

Concurrency model: the session's dicts are touched only on the event-loop thread; analyses get an
immutable ``Snapshot`` and run in thread pools (``static`` for the as-you-type tier, task discovery and
facts; ``run`` for sandboxed simulations and verifications). Every piece of work is a named task —
``static:URI``, ``simulate:URI``, ``verify:URI``, ``remote:URI`` — and starting a task cancels the one of
the same name (a cancelled run kills its sandboxed worker). A result is published only if its snapshot is
still the current revision and it was computed under the current settings.

Static checks run at once when the document's checks are faster than its typing (the last check took
less than the pause between the last two keystrokes; the first change after opening runs at once); only when analysis is slower than typing do they
wait ``debounceMs`` after the last change, so a burst of keystrokes is checked once (``static_delay``).

Every save's runs show work-done progress while they go on (``progress.WorkProgress``: never delayed by it).

A save that arrives before the server is ready (``initialized``, and the client's settings pulled when it
sent none at launch) is kept and run once it is, under the settings the client sent — never lost, never
run with the defaults (``mark_ready``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from lsprotocol import types as T

from ..toolchain.protocol.jobs import SimulateResult
from . import analysis
from .analysis import RunResult
from .documents import Snapshot
from .progress import WorkProgress
from .remote import Remote
from .session import Session
from .tasks import TaskRef

if TYPE_CHECKING:
    from .app import NkiLanguageServer
    from .publish import Publisher

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, server: NkiLanguageServer, session: Session, publisher: Publisher,
                 static_pool: ThreadPoolExecutor) -> None:
        self.server = server
        self.session = session
        self.publisher = publisher
        self.static_pool = static_pool
        self.run_pool = ThreadPoolExecutor(2, thread_name_prefix="nki-run")
        self.remote = Remote(server)
        self.tasks: dict[str, asyncio.Task[Any]] = {}
        self.ready = False
        self._saved: list[str] = []  # documents saved before the server was ready, in order

    # -- named tasks -----------------------------------------------------------------------------------
    def spawn(self, name: str, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``work`` as the task ``name``, cancelling the one of that name still running."""
        old = self.tasks.get(name)
        if old is not None and not old.done():
            old.cancel()
        task = asyncio.ensure_future(work)
        self.tasks[name] = task
        task.add_done_callback(lambda t: self.tasks.pop(name, None) if self.tasks.get(name) is t else None)
        return task

    def cancel_document(self, uri: str) -> None:
        for name, task in list(self.tasks.items()):
            if name.endswith(":" + uri):
                task.cancel()

    def cancel_all(self) -> None:
        for task in list(self.tasks.values()):
            task.cancel()

    # -- static tier -------------------------------------------------------------------------------------
    def static_delay(self, uri: str) -> float:
        """0 when the document's checks keep up with its typing, else the debounce."""
        wait = self.session.settings.debounce_ms / 1000
        st = self.session.docs.get(uri)
        if wait <= 0 or st is None or st.static_cost is None:
            return 0.0
        if st.typing_gap is None or st.static_cost <= st.typing_gap:
            return 0.0
        self.session.stats.debounced += 1
        return wait

    def schedule_static(self, snap: Snapshot, delay: float | None = None, only_if_changed: bool = False) -> None:
        """Check ``snap`` after ``delay`` (default: ``static_delay``) and publish; ``only_if_changed``: stay
        quiet when the diagnostics come out as already published (the re-check after a run)."""
        wait = self.static_delay(snap.uri) if delay is None else delay
        self.spawn(f"static:{snap.uri}", self._static(snap, wait, only_if_changed))

    async def _static(self, snap: Snapshot, delay: float, only_if_changed: bool) -> None:
        session = self.session
        try:
            if delay > 0:
                await asyncio.sleep(delay)
            if not session.store.is_current(snap):
                return
            shapes = session.input_shapes(snap, session.cached_facts(snap))
            key = session.key

            def check() -> tuple[analysis.StaticResult, float]:
                began = time.perf_counter()
                result = analysis.static(snap, session.check_settings(snap, shapes))
                return result, time.perf_counter() - began

            result, took = await asyncio.get_running_loop().run_in_executor(self.static_pool, check)
            session.stats.static_runs += 1
        except asyncio.CancelledError:
            return
        except Exception:  # an analysis bug costs one log line, never the server
            log.exception("static analysis failed for %s", snap.uri)
            session.stats.errors += 1
            return
        st = session.docs.get(snap.uri)
        if st is not None:
            st.static_cost = took  # the last check's time: a cold first check (open) is not what typing meets
        if not session.store.is_current(snap) or key != session.key or st is None:
            session.stats.stale_dropped += 1
            return
        st.static, st.static_key = result, key
        self.publisher.publish(snap.uri, only_if_changed)

    # -- run tier --------------------------------------------------------------------------------------------
    async def run(self, kind: str, snap: Snapshot, task: TaskRef, name: str | None = None) -> RunResult | None:
        """Simulate or verify ``snap`` in the sandbox; publish if still current (None: cancelled or failed)."""
        settings = self.session.settings
        return await self._await(name or f"{kind}:{snap.uri}", self._execute(
            kind, snap, lambda stop: analysis.run(kind, snap, task, settings, stop)))

    async def run_taskless(self, snap: Snapshot, via: str = "", kernel_name: str = "") -> RunResult | None:
        """Simulate ``snap``, a kernel with no task, in the sandbox all the same (its ``__main__`` driver, a
        pytest test of the workspace, its shape lines: ``toolchain.taskless``; ``via`` / ``kernel_name``: only
        that source, as a runnable lens asks); publish if still current."""
        settings, root = self.session.settings, self.session.root
        return await self._await(f"simulate:{snap.uri}", self._execute(
            "simulate", snap, lambda stop: analysis.run_taskless(snap, settings, root, stop, via, kernel_name)))

    async def _await(self, name: str, work: Coroutine[Any, Any, RunResult | None]) -> RunResult | None:
        try:
            result: RunResult | None = await self.spawn(name, work)
            return result
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # this caller is cancelled itself
            return None  # replaced by a newer task of the same name

    async def _execute(self, kind: str, snap: Snapshot, job: Callable[[threading.Event], RunResult]) -> RunResult | None:
        session = self.session
        stop = threading.Event()
        try:
            result = await asyncio.get_running_loop().run_in_executor(self.run_pool, job, stop)
            session.stats.sim_runs += 1
        except asyncio.CancelledError:
            stop.set()  # the sandboxed worker is killed, not left running for a result nobody wants
            raise
        except Exception:
            log.exception("%s failed for %s", kind, snap.uri)
            session.stats.errors += 1
            return None
        if not session.store_run(snap.uri, result):
            return result
        if session.store.is_current(snap):
            self.publisher.publish(snap.uri)
            if isinstance(result.result, SimulateResult) and (result.result.inputs or result.result.launches):
                # the inputs make the static checks rank-aware; a save still publishes once unless that
                # re-check finds something new
                self.schedule_static(snap, 0, only_if_changed=True)
        else:
            session.stats.stale_dropped += 1
        return result

    def on_save(self, snap: Snapshot) -> None:
        """simulate (or verify, ``verifyOnSave`` local / remote) the saved revision; ``remote`` also sends
        it to the runner (the local run still gives hovers their trace and flags a disagreement). A kernel
        with no task is simulated all the same (``run_taskless``): verification needs a task. Before the
        server is ready the save is kept for ``mark_ready``."""
        if not self.ready:
            log.info("saved before the server was ready: %s runs once it is", snap.uri)
            if snap.uri not in self._saved:
                self._saved.append(snap.uri)
            return
        if snap.too_large:
            return
        settings = self.session.settings
        if not (settings.simulate_on_save or settings.verify_on_save != "off"):
            return
        self.spawn(f"save:{snap.uri}", self._save(snap))

    async def _save(self, snap: Snapshot, kinds: set[str] | None = None) -> None:
        """The save's runs (or, with ``kinds``, those of them that were shown before a settings change), with
        work-done progress while they run (cancelling it stops them)."""
        task = await self.session.task(snap)
        settings = self.session.settings
        verb = "verifying" if task is not None and (settings.verify_on_save != "off" or kinds == {"verify"}) \
            else "simulating"
        shown = WorkProgress(self.server, f"NKI: {verb} on save", snap.path, asyncio.current_task())
        try:
            await self._save_runs(snap, task, kinds)
        finally:
            shown.end()

    async def _save_runs(self, snap: Snapshot, task: TaskRef | None, kinds: set[str] | None) -> None:
        settings = self.session.settings
        if task is None:
            rerun = kinds is None or "simulate" in kinds or "verify" in kinds
            if rerun and await self.run_taskless(snap) is not None:
                self.refresh_views()  # the lens says what ran
            return
        mode = settings.verify_on_save
        if kinds is None and mode == "remote" and not settings.runner_url:
            self.show_once("runner-url", 'NKI Agent: verifyOnSave is "remote" but nkiAgent.runnerUrl is empty; '
                           "verifying with the embedded simulator.", T.MessageType.Warning)
        if kinds is None:
            kinds = {"verify" if mode != "off" else "simulate"} | ({"remote"} if mode == "remote" else set())
        if "remote" in kinds and settings.runner_url:
            self.spawn(f"remote:{snap.uri}", self.remote.run(snap, task))
        runs = [k for k in ("verify", "simulate") if k in kinds]
        results = await asyncio.gather(*(self.run(k, snap, task) for k in runs))
        if any(r is not None for r in results):
            self.refresh_views()

    def mark_ready(self) -> None:
        """The settings are known: run the saves that came in before."""
        if self.ready:
            return
        self.ready = True
        saved, self._saved = self._saved, []
        for uri in saved:
            snap = self.session.store.get(uri)
            if snap is not None:
                self.on_save(snap)

    def settings_changed(self, dropped: dict[str, set[str]]) -> None:
        """New settings: check every open document again; run again what was shown under the old ones."""
        for uri in self.session.store.uris():
            snap = self.session.store.get(uri)
            if snap is None:
                continue
            self.schedule_static(snap, 0)
            kinds = dropped.get(uri, set())
            if kinds and self.ready and not snap.too_large:
                self.spawn(f"save:{uri}", self._save(snap, set(kinds)))
        if dropped:
            self.refresh_views()

    # -- the client ---------------------------------------------------------------------------------------
    def refresh_views(self) -> None:
        """Ask the client to fetch code lenses and inlay hints again (what a run or a settings change altered)."""
        caps = self.server.client_capabilities.workspace
        if caps and caps.code_lens and caps.code_lens.refresh_support:
            self.server.workspace_code_lens_refresh(None)
        if caps and caps.inlay_hint and caps.inlay_hint.refresh_support:
            self.server.workspace_inlay_hint_refresh(None)

    def show_once(self, key: str, message: str, kind: T.MessageType = T.MessageType.Info) -> None:
        if key in self.session.notified:
            return
        self.session.notified.add(key)
        self.server.window_show_message(T.ShowMessageParams(type=kind, message=message))
