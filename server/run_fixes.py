"""Verified quick fixes of the run tiers (``nki-sim``, ``nki-verify``): the deterministic fixes the rules
agent applies to problems only a run finds (``diagnostics.sim_fixes.fixes_for``: carried dependencies,
PSUM stores, 1-D aranges, ``and`` in masks, tile constants above 128, bf16 PSUM accumulators, ...).

A candidate is offered only after the check a run of the user would make: the fix applied to the buffer
revision the diagnostic belongs to, the static checks add no code, and the same tier (simulate or
verify) run again in the sandbox against the same task (``analysis.run``, the buffer's private temp
copy with the document's folder importable; a task-less simulation runs again in the same task-less
order, ``analysis.run_taskless``) no longer reports the problem and reports nothing new
(``sim_fixes.repairs``; a verification that runs but computes the wrong result counts as a new problem).

The re-runs happen in the run pool, never on the event loop, once per (revision, tier run, diagnostic):
a code action awaits the pending result (a cancelled request leaves it running for the next one). Fixes
belong to the revision they were computed on: a newer revision stops the re-runs still going for an
older one, and a result whose revision is no longer current is never offered. The code action pins
its edit to the document version as well.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..diagnostics.fixes import apply_edits
from ..diagnostics.model import Diagnostic, Fix
from ..diagnostics.sim_fixes import fixes_for, problem_codes, repairs
from ..diagnostics.static import Settings as CheckSettings
from ..diagnostics.static import check_text
from . import analysis
from .analysis import RunResult

if TYPE_CHECKING:
    from .app import NkiLanguageServer
    from .documents import Snapshot
    from .session import Session
    from .tasks import TaskRef

log = logging.getLogger(__name__)

RUN_TIERS = ("simulate", "verify")  # the kinds of ``DocState.runs`` whose diagnostics get fixes here
MAX_CANDIDATES = 6  # sandboxed re-runs per diagnostic; real problems have one to three candidates


def verified_run_fixes(run: RunResult, index: int, snap: Snapshot, rerun: Callable[[Snapshot], RunResult],
                       check: CheckSettings, cancel: threading.Event | None = None) -> list[Fix]:
    """The candidate fixes of ``run.diagnostics[index]`` that survive their re-run (see the module doc):
    ``rerun`` runs a snapshot the way ``run`` was made (same tier, same task or task-less order).
    Blocking: call it in a worker thread. ``cancel`` stops between the re-runs (and ``rerun`` inside one)."""
    diag = run.diagnostics[index]
    candidates = fixes_for(diag, snap.text, snap.path)[:MAX_CANDIDATES]
    if not candidates:
        return []
    before = problem_codes(run.diagnostics)
    static_before = problem_codes(check_text(snap.path, snap.text, check))
    kept: list[Fix] = []
    for fix in candidates:
        if cancel is not None and cancel.is_set():
            return []
        try:
            fixed = apply_edits(snap.text, fix.edits)
        except ValueError:
            continue
        static_after = problem_codes(check_text(snap.path, fixed, check))
        if any(static_after[c] > static_before[c] for c in static_after):
            continue  # cheap first: a fix the static checks already object to needs no sandbox
        again = rerun(replace(snap, text=fixed))
        if cancel is not None and cancel.is_set():
            return []
        if repairs(diag.code, before, problem_codes(again.diagnostics)):
            kept.append(fix)
    return kept


@dataclass
class _Revision:
    """The fix computations of one document revision."""

    revision: int
    stop: threading.Event = field(default_factory=threading.Event)
    jobs: dict[tuple[str, int, int], tuple[RunResult, asyncio.Future[list[Fix]]]] = field(default_factory=dict)


_docs: dict[str, _Revision] = {}  # uri -> the newest revision asked about (touched on the event loop only)


def run_of(session: Session, snap: Snapshot, kind: str) -> RunResult | None:
    """The ``kind`` run of this very revision, if there is one."""
    st = session.docs.get(snap.uri)
    run = st.runs.get(kind) if st is not None else None
    return run if run is not None and run.revision == snap.revision else None


def matching(session: Session, snap: Snapshot, d: Diagnostic) -> list[tuple[str, int]]:
    """(tier, index) of the run diagnostics of this revision with ``d``'s code and range: a problem both
    the static check and a run report is published once, as the static one, and keeps the run's fixes."""
    out = []
    for kind in RUN_TIERS:
        run = run_of(session, snap, kind)
        for k, rd in enumerate(run.diagnostics if run is not None else ()):
            if (rd.code, rd.line, rd.column, rd.end_line, rd.end_column) == \
                    (d.code, d.line, d.column, d.end_line, d.end_column):
                out.append((kind, k))
    return out


def _rerun(session: Session, task: TaskRef | None, run: RunResult,
           stop: threading.Event) -> Callable[[Snapshot], RunResult] | None:
    """How to run a fixed buffer the way ``run`` ran: against the document's task (None when it is no longer
    the task that run used), or, for a task-less run, in the same task-less order."""
    settings = session.settings
    if not run.task:  # a task-less simulation (its __main__ driver, a workspace test, its shape lines)
        taskless = getattr(analysis, "run_taskless", None)
        if taskless is None or run.kind != "simulate":
            return None
        root = session.root
        return lambda s: taskless(s, settings, root, stop)  # type: ignore[no-any-return]
    if task is None or task.path != run.task:
        return None
    kind = run.kind
    return lambda s: analysis.run(kind, s, task, settings, stop)


async def run_fixes(ls: NkiLanguageServer, snap: Snapshot, kind: str, index: int) -> list[Fix]:
    """The verified fixes of diagnostic ``index`` of the ``kind`` run of ``snap``'s revision ([] when that
    run is of another revision, its task is no longer the document's, or the buffer moved on meanwhile)."""
    session = ls.session
    run = run_of(session, snap, kind)
    if run is None or not 0 <= index < len(run.diagnostics):
        return []
    entry = _docs.get(snap.uri)
    if entry is None or entry.revision != snap.revision:
        if entry is not None:
            entry.stop.set()  # an older revision's re-runs: nobody will be offered their fixes
        entry = _docs[snap.uri] = _Revision(snap.revision)
    for uri in [u for u in _docs if session.store.get(u) is None]:
        _docs.pop(uri).stop.set()  # closed documents
    key = (kind, index, id(run))
    job = entry.jobs.get(key)
    if job is None:
        task = await session.task(snap) if run.task else None
        rerun = _rerun(session, task, run, entry.stop)
        if rerun is None:
            return []
        check = await session.check_settings_async(snap)
        job = entry.jobs.get(key)  # another request may have started it while this one awaited
        if job is None:
            fut = asyncio.get_running_loop().run_in_executor(ls.scheduler.run_pool, verified_run_fixes, run, index,
                                                             snap, rerun, check, entry.stop)
            job = entry.jobs[key] = (run, fut)  # the entry keeps ``run`` alive, so its id stays unique
    try:
        fixes = await asyncio.shield(job[1])  # a cancelled request leaves the computation to the next one
    except Exception:
        log.exception("run-tier fixes failed for %s", snap.uri)
        return []
    return fixes if session.store.is_current(snap) else []
