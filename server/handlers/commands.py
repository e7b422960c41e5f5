"""workspace/executeCommand: Explain error, Verify now (Fix kernel with agent: ``agent_fix.py``).

``nki.explainError CODE`` returns the explanation as Markdown and shows it as a Markdown document: the
text is written to the user's cache folder (``explain.explain_file``) and opened with
``window/showDocument`` when the client supports it. A client without it still has the returned
Markdown and the same explanation as the hover on the diagnostic's range; nothing goes to
``showMessage``.

``nki.verify`` returns at once and verifies the open buffer against its task in the background
(work-done progress when the client supports it, ``progress.py``; cancelling it drops the result), then publishes
the ``nki-verify`` diagnostics, refreshes the code lenses and shows one summary message.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from lsprotocol import types as T
from nki_agent.toolchain.protocol.jobs import VerifyResult

from .. import progress
from ..convert import file_uri
from ..explain import explain, explain_file
from ..progress import WorkProgress

if TYPE_CHECKING:
    from ..app import NkiLanguageServer
    from ..documents import Snapshot
    from ..tasks import TaskRef

log = logging.getLogger(__name__)

EXPLAIN = "nki.explainError"
VERIFY = "nki.verify"
FIX_KERNEL = "nki.fixKernel"


NO_TASK = ("NKI: no task found for this kernel (add `# nki-task: path/to/task.py`, a sibling task.py, or a "
           "nkiAgent.taskMap entry)")


def no_task(ls: Any) -> dict[str, Any]:
    """A command that needs a task, on a document without one: say so once, start nothing."""
    ls.window_show_message(T.ShowMessageParams(type=T.MessageType.Warning, message=NO_TASK))
    return {"started": False, "reason": "no task"}


def open_document(ls: Any, command: str, args: tuple[Any, ...]) -> Snapshot:
    """The open document a command's first argument names (a URI or ``{"uri": ...}``); a clear error otherwise."""
    uri = uri_arg(args)
    snap = ls.session.store.get(uri) if uri else None
    if snap is None:
        raise ValueError(f"{command} needs the URI of an open document")
    return snap  # type: ignore[no-any-return]


def uri_arg(args: tuple[Any, ...]) -> str | None:
    if not args:
        return None
    a = args[0]
    if isinstance(a, str):
        return a
    if isinstance(a, dict):
        return a.get("uri") if isinstance(a.get("uri"), str) else None
    return getattr(a, "uri", None)


async def _verify_job(ls: NkiLanguageServer, snap: Snapshot, task: TaskRef) -> None:
    shown = WorkProgress(ls, "NKI: verifying", snap.path, asyncio.current_task())
    result = None
    try:
        result = await ls.scheduler.run("verify", snap, task, name=f"command:{snap.uri}")
    except asyncio.CancelledError:
        ls.window_show_message(T.ShowMessageParams(type=T.MessageType.Info, message="NKI: verification cancelled"))
        return
    finally:
        shown.end()
    ls.scheduler.refresh_views()
    if result is None:
        msg, kind = "NKI: verification failed to run (see the server log)", T.MessageType.Error
    elif result.correct:
        max_abs = result.result.max_abs_error if isinstance(result.result, VerifyResult) else 0.0
        msg = f"NKI: ✓ verified on {result.result.target} (max abs error {max_abs:.3g})"
        kind = T.MessageType.Info
    else:
        codes = ", ".join(sorted({d.code for d in result.diagnostics})) or "wrong result"
        msg, kind = f"NKI: ✗ verification failed: {codes}", T.MessageType.Warning
    ls.window_show_message(T.ShowMessageParams(type=kind, message=msg))


async def show_markdown(ls: Any, code: str, text: str) -> bool:
    """Open ``text`` as a Markdown document in the client (``window/showDocument`` of the cached file);
    False when the client cannot show documents, refuses, or the cache folder is not writable."""
    caps = ls.client_capabilities.window
    if caps is None or caps.show_document is None or not caps.show_document.support:
        return False
    try:
        path = await asyncio.get_running_loop().run_in_executor(None, explain_file, code, text)
    except (OSError, ValueError) as e:
        log.warning("explain: cannot write the document for %s: %s", code[:40], e)
        return False
    try:
        res = await ls.window_show_document_async(T.ShowDocumentParams(uri=file_uri(str(path)), take_focus=True))
    except Exception as e:  # noqa: BLE001 - the client errored: the command still returns the Markdown
        log.warning("window/showDocument failed: %s", e)
        return False
    return bool(getattr(res, "success", False))


def register(ls: NkiLanguageServer) -> None:
    @ls.command(EXPLAIN)
    # command handlers are introspected with get_type_hints: annotations must resolve at run time
    async def explain_error(ls: Any, *args: Any) -> str:
        code = args[0] if args and isinstance(args[0], str) else None
        if code is None:
            raise ValueError("nki.explainError needs an error code argument")
        text = explain(code)
        await show_markdown(ls, code, text)
        return text

    @ls.command(VERIFY)
    async def verify(ls: Any, *args: Any) -> dict[str, Any]:
        snap = open_document(ls, VERIFY, args)
        task = await ls.session.task(snap)
        if task is None:
            return no_task(ls)
        if ls.session.settings.runner_url:  # the runner verifies (and times) it too; its result joins the lens
            ls.scheduler.spawn(f"remote:{snap.uri}", ls.scheduler.remote.run(snap, task))
        asyncio.ensure_future(_verify_job(ls, snap, task))
        return {"started": True, "task": task.path, "how": task.how}

    @ls.feature(T.WINDOW_WORK_DONE_PROGRESS_CANCEL)
    def cancel(ls: NkiLanguageServer, params: T.WorkDoneProgressCancelParams) -> None:
        from . import agent_fix

        if not progress.cancel(str(params.token)):
            agent_fix.cancel(str(params.token))
