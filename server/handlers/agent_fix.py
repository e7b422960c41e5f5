"""workspace/executeCommand ``nki.fixKernel``: the fix agent from the editor, and its one edit.

The command returns at once; the run goes on in the run pool on an immutable snapshot (uri, version,
text) of the buffer, reporting ``window/workDoneProgress`` ("turn 1: asking rules", "turn 1: running
verify", cost so far; cancellable).
At the end the verified kernel becomes ONE minimal ``TextDocumentEdit`` pinned to the snapshot's
version, sent with ``workspace/applyEdit`` only if the buffer is still at that version — the client
refuses a versioned edit too, so a keystroke typed meanwhile is never overwritten (one undo restores
the previous text). A stale result is not applied; the user is offered a rerun. The outcome goes out
as ``window/showMessage`` (summary), ``window/logMessage`` (the diff) and an ``nki/agentResult``
notification (verdict, diff, applied, rejected, dollars, tokens) for clients that render it. One run per
document at a time.

A client that previews the edit (the VS Code extension shows a diff with Accept / Reject) answers
``workspace/applyEdit`` with ``applied: false`` and the failure reason ``REJECTED`` when the user rejects
it: that is "rejected", not "stale" (no Rerun offered). Any other refusal is stale. A client that shows
its own progress (``nki.fixKernel [{"uri": U, "progress": "client"}]``) gets ``nki/agentProgress``
notifications (``{uri, message, dollars, tokens}``) instead of ``window/workDoneProgress``, and cancels
with ``nki.cancelAgent [U]``.

The agent's verification of its text is remembered by the text's hash before the edit goes out: when the
buffer becomes that exact text (applied at once, or on Accept in a preview, before or after the client's
answer), the document's verify result is the agent's and the lens says "✓ verified … by the agent".
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from lsprotocol import types as T

from ...agent.backends import SpecError, make_chain
from ...agent.loop import AgentConfig, AgentResult, Event, run_agent
from ...agent.router import Router
from ...agent.snapshot import Snapshot as AgentSnapshot
from ...agent.trajectory import default_dir, mark_accepted
from .. import analysis
from ..analysis import RunResult
from ..positions import LineIndex
from ..progress import progress_token
from ..tasks import SELF, TaskRef
from .commands import FIX_KERNEL, uri_arg

if TYPE_CHECKING:
    from ..app import NkiLanguageServer
    from ..documents import Snapshot

log = logging.getLogger(__name__)

RESULT_NOTIFICATION = "nki/agentResult"
PROGRESS_NOTIFICATION = "nki/agentProgress"
# workspace/applyEdit failureReason of a client whose user rejected the previewed fix (not a stale edit)
REJECTED = "rejected by the user"
RERUN = "Rerun"
# Test-only: run candidates in the server process instead of the sandbox (fast race trials). Never set by users.
IN_PROCESS_ENV = "NKI_AGENT_TEST_IN_PROCESS"
_by_token: dict[str, threading.Event] = {}  # progress token -> cancel event of that run
_by_uri: dict[str, threading.Event] = {}  # document -> cancel event of its running agent
CANCEL_AGENT = "nki.cancelAgent"
AGENT_THREADS = 2  # concurrent agent runs (each mostly waits on a model or a sandboxed verification)
_executor: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    """Agent runs get their own threads: a long run must not hold up Verify now or on-save simulation."""
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(AGENT_THREADS, thread_name_prefix="nki-agent")
    return _executor


def cancel_all() -> None:
    """Stop every run (server shutdown): their sandbox workers are killed, nothing is applied."""
    for ev in list(_by_uri.values()):
        ev.set()


def cancel(token: str) -> bool:
    """Cancel the run behind a progress token (``window/workDoneProgress/cancel``)."""
    ev = _by_token.get(token)
    if ev is None:
        return False
    ev.set()
    return True


def _config(ls: Any) -> AgentConfig:
    s = ls.session.settings
    return AgentConfig(max_turns=s.agent_max_turns, max_dollars=s.agent_max_dollars,
                       target=None if s.target == "auto" else s.target,
                       sdk_generation="new" if s.api_generation == "new" else "",
                       trajectory_dir=default_dir(), isolate=os.environ.get(IN_PROCESS_ENV) != "1")


def _message(ls: Any, kind: T.MessageType, text: str) -> None:
    ls.window_show_message(T.ShowMessageParams(type=kind, message=text))


def client_progress(args: tuple[Any, ...]) -> bool:
    """Does the client show its own progress (``[{"uri": U, "progress": "client"}]``)?"""
    return bool(args) and isinstance(args[0], dict) and args[0].get("progress") == "client"


async def start(ls: Any, uri: str, own_progress: bool = False) -> dict[str, Any]:
    snap = ls.session.store.get(uri)
    if snap is None:
        raise ValueError(f"{FIX_KERNEL} needs the URI of an open document")
    task = await ls.session.task(snap)
    if task is None:
        _message(ls, T.MessageType.Warning, "NKI Agent: no task found for this kernel (add `# nki-task: "
                 "path/to/task.py`, a sibling task.py, or a nkiAgent.taskMap entry); the agent verifies against it.")
        return {"started": False, "reason": "no task"}
    if uri in _by_uri:
        _message(ls, T.MessageType.Info, "NKI Agent: already fixing this kernel; cancel that run first "
                 f"(progress cancel, or the `{CANCEL_AGENT}` command).")
        return {"started": False, "reason": "already running"}
    try:
        router = Router(make_chain(ls.session.settings.model_backend))
    except (SpecError, ValueError) as e:
        _message(ls, T.MessageType.Error, f"NKI Agent: nkiAgent.modelBackend: {e}")
        return {"started": False, "reason": str(e)}
    ev = threading.Event()
    _by_uri[uri] = ev  # claimed before any await: a second command for this document sees it
    token = None if own_progress else await progress_token(ls)
    if token is not None:
        _by_token[token] = ev
    asyncio.ensure_future(_job(ls, snap, task, router, token, ev, own_progress))
    return {"started": True, "task": task.path, "how": task.how, "token": token,
            "backends": [f"{b.name}:{b.model}" for b in router.tiers]}


def progress_text(e: Event) -> str:
    """One progress line: the turn and the backend asked ("turn 1: asking rules"), what ran in that turn
    ("turn 1: running verify"), then the cost so far. Before the first turn there is no turn to name."""
    text = e.message[:120]
    if e.kind != "turn" and e.turn:  # a turn event already says "turn N: asking <backend>"
        text = f"turn {e.turn}: {text}"
    return f"{text} · ${e.dollars:.3f}, {e.tokens} tokens"


async def _job(ls: Any, snap: Snapshot, task: TaskRef, router: Router, token: str | None,
               ev: threading.Event, own_progress: bool = False) -> None:
    loop = asyncio.get_running_loop()
    progress = ls.work_done_progress
    if token is not None:
        progress.begin(token, T.WorkDoneProgressBegin(title="NKI Agent: fixing kernel", cancellable=True,
                                                      message=f"{os.path.basename(snap.path)} with {router.label}"))

    def report(e: Event) -> None:
        if e.kind not in ("start", "turn", "tool", "route", "result"):
            return
        if token is not None:
            loop.call_soon_threadsafe(progress.report, token, T.WorkDoneProgressReport(message=progress_text(e)))
        elif own_progress:
            loop.call_soon_threadsafe(ls.protocol.notify, PROGRESS_NOTIFICATION, {
                "uri": snap.uri, "message": progress_text(e), "dollars": e.dollars, "tokens": e.tokens})

    self_task = task.path == SELF
    key = ls.session.key  # the settings the agent's verification runs under
    work = functools.partial(run_agent, AgentSnapshot(snap.uri, snap.version, snap.text), snap.path,
                             snap.path if self_task else task.path, router, _config(ls), self_task=self_task,
                             cancel=ev, on_event=report)
    result: AgentResult | None = None
    try:
        result = await loop.run_in_executor(_pool(), work)
    except Exception as e:
        log.exception("agent run failed")
        _message(ls, T.MessageType.Error, f"NKI Agent: the agent failed: {type(e).__name__}: {e}")
    finally:
        if _by_uri.get(snap.uri) is ev:
            del _by_uri[snap.uri]
        if token is not None:
            _by_token.pop(token, None)
            progress.end(token, T.WorkDoneProgressEnd(message=result.verdict if result else "failed"))
    if result is not None:
        await _finish(ls, snap, task, result, own_progress, key)


async def _remember_verification(ls: Any, snap: Snapshot, task: TaskRef, result: AgentResult,
                                 key: tuple[Any, ...]) -> None:
    """The agent verified ``result.final_text``: when the buffer becomes that text (the edit applied now, or
    Accept in a client's preview later), its verify result is the agent's (``Session.adopt_agent_verification``)."""
    res = result.verify
    if res is None or not res.correct or not result.trusted(ls.session.settings.trust_local):
        return
    text = result.final_text
    kernels = await asyncio.get_running_loop().run_in_executor(ls.session.pool, analysis.ran_kernels, res, text, task)
    ls.session.agent_verified(snap.uri, RunResult("verify", 0, snap.version, (), res, task.path, text, kernels,
                                                  key, by="agent"))


async def _finish(ls: Any, snap: Snapshot, task: TaskRef, result: AgentResult, own_progress: bool = False,
                  key: tuple[Any, ...] = ()) -> None:
    applied, stale, rejected = False, False, False
    refused = result.edit is not None and not result.trusted(ls.session.settings.trust_local)
    if refused:
        _message(ls, T.MessageType.Warning, f"NKI Agent: {result.refusal()}")
        if result.trajectory:
            mark_accepted(result.trajectory, False, "editor: verified outside the sandbox, not applied", trusted=False)
    elif result.edit is not None:
        current = ls.session.store.get(snap.uri)
        if current is None or current.version != snap.version or current.text != snap.text:
            stale = True
        else:
            await _remember_verification(ls, snap, task, result, key)
            index = LineIndex.of(snap.text)
            (l1, c1), (l2, c2) = index.position(result.edit.start), index.position(result.edit.end)
            edit = T.TextEdit(range=T.Range(start=T.Position(line=l1, character=c1), end=T.Position(line=l2, character=c2)),
                              new_text=result.edit.new_text)
            params = T.ApplyWorkspaceEditParams(label="NKI Agent: fix kernel", edit=T.WorkspaceEdit(document_changes=[
                T.TextDocumentEdit(text_document=T.OptionalVersionedTextDocumentIdentifier(uri=snap.uri,
                                                                                           version=snap.version),
                                   edits=[edit])]))
            try:
                resp = await ls.workspace_apply_edit_async(params)
                applied = bool(resp.applied)
                rejected = not applied and resp.failure_reason == REJECTED
            except Exception as e:  # noqa: BLE001 - the client errored: treat as not applied
                log.warning("workspace/applyEdit failed: %s", e)
            stale = not applied and not rejected
            now = ls.session.store.get(snap.uri)
            if applied and now is not None and ls.session.adopt_agent_verification(now):
                ls.publisher.publish(snap.uri)  # the client changed the text before answering
                ls.scheduler.refresh_views()
        if result.trajectory:
            note = "editor: applied" if applied else "editor: rejected by the user" if rejected else \
                "editor: stale, not applied"
            mark_accepted(result.trajectory, applied, note, trusted=result.trusted(ls.session.settings.trust_local))
    if result.diff:
        ls.window_log_message(T.LogMessageParams(type=T.MessageType.Info,
                                                 message=f"NKI Agent diff for {snap.path}:\n{result.diff}"))
    if stale:
        _offer_rerun(ls, snap.uri, result, own_progress)
    elif rejected:
        _message(ls, T.MessageType.Info, "NKI Agent: fix rejected; the kernel is unchanged (the diff is in the log).")
    else:
        kind = T.MessageType.Info if result.ok else T.MessageType.Warning
        _message(ls, kind, f"NKI Agent: {result.summary()}")
    ls.protocol.notify(RESULT_NOTIFICATION, {  # last: a client that waits for it has seen everything else
        "uri": snap.uri, "version": snap.version, "verdict": result.verdict, "summary": result.summary(),
        "diff": result.diff, "applied": applied, "stale": stale, "rejected": rejected,
        "trajectory": result.trajectory, "sandbox": result.sandbox, "refused": refused,
        "dollars": result.dollars, "tokens": result.usage.total, "turns": result.turns})


def _offer_rerun(ls: Any, uri: str, result: AgentResult, own_progress: bool = False) -> None:
    """Ask "Rerun?" (the request goes out now; the answer is awaited in the background)."""
    params = T.ShowMessageRequestParams(
        type=T.MessageType.Warning, actions=[T.MessageActionItem(title=RERUN)],
        message=f"NKI Agent: the kernel changed while the agent ran, so its fix was not applied "
                f"({result.summary().splitlines()[0]}). Rerun on the current text?")
    try:
        answer = ls.protocol.send_request_async(T.WINDOW_SHOW_MESSAGE_REQUEST, params)
    except Exception:  # noqa: BLE001 - the transport is gone: nothing to ask
        return

    async def wait() -> None:
        try:
            choice = await answer
        except Exception:  # noqa: BLE001 - the client cannot ask: the message was the best we could do
            return
        if choice is not None and getattr(choice, "title", None) == RERUN:
            if ls.session.store.get(uri) is None:
                _message(ls, T.MessageType.Info, "NKI Agent: the document was closed; open it and run the fix again.")
                return
            try:
                await start(ls, uri, own_progress)
            except Exception as e:  # noqa: BLE001 - nobody awaits this task: say it instead
                _message(ls, T.MessageType.Error, f"NKI Agent: could not rerun: {e}")

    asyncio.ensure_future(wait())


def register(ls: NkiLanguageServer) -> None:
    @ls.command(CANCEL_AGENT)
    def cancel_agent(ls: Any, *args: Any) -> dict[str, Any]:
        """Cancel the run on one document (``[uri]``) or every run (no argument)."""
        uri = uri_arg(args)
        targets = [_by_uri[uri]] if uri in _by_uri else [] if uri else list(_by_uri.values())
        for ev in targets:
            ev.set()
        return {"cancelled": len(targets)}

    @ls.command(FIX_KERNEL)
    async def fix_kernel(ls: Any, *args: Any) -> dict[str, Any]:
        uri = uri_arg(args)
        if uri is None:
            raise ValueError(f"{FIX_KERNEL} needs the URI of an open document")
        return await start(ls, uri, client_progress(args))
