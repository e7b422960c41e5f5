"""Work-done progress (``window/workDoneProgress``) for the server's runs: Verify now, the runnable lenses' runs and
every on-save run, so the client shows a spinner while a 10–15 s simulation goes on.

``WorkProgress`` never delays the work it reports on: the token is asked of the client in the background and the
progress begins when the client answers (if the work is still running); ``end`` closes it whichever came first.
A cancellable progress maps its token to the asyncio task doing the work, so the client's cancel
(``window/workDoneProgress/cancel``, ``cancel``) stops it — and with it the sandboxed worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

from lsprotocol import types as T

_jobs: dict[str, asyncio.Task[Any]] = {}  # progress token -> the task its cancel stops


async def progress_token(ls: Any) -> str | None:
    """A fresh ``window/workDoneProgress`` token, or None when the client has no progress support or refuses."""
    caps = ls.client_capabilities.window
    if caps is None or not caps.work_done_progress:
        return None
    token = str(uuid.uuid4())
    try:
        await ls.work_done_progress.create_async(token)
    except Exception:  # noqa: BLE001 - the client refused: work without progress
        return None
    return token


class WorkProgress:
    """One progress notification for one piece of work (``end`` it in a ``finally``)."""

    def __init__(self, ls: Any, title: str, message: str, job: asyncio.Task[Any] | None = None) -> None:
        self.ls, self.title, self.message, self.job = ls, title, message, job
        self.token: str | None = None
        self.ended = False
        self._asking = asyncio.ensure_future(self._begin())

    async def _begin(self) -> None:
        token = await progress_token(self.ls)
        if token is None or self.ended:
            return
        self.token = token
        if self.job is not None:
            _jobs[token] = self.job
        self.ls.work_done_progress.begin(token, T.WorkDoneProgressBegin(
            title=self.title, message=self.message, cancellable=self.job is not None))

    def report(self, message: str) -> None:
        if self.token is not None and not self.ended:
            self.ls.work_done_progress.report(self.token, T.WorkDoneProgressReport(message=message))

    def end(self, message: str = "done") -> None:
        if self.ended:
            return
        self.ended = True
        if self.token is None:
            self._asking.cancel()  # the client has not answered yet: nothing was shown
            return
        _jobs.pop(self.token, None)
        with contextlib.suppress(Exception):  # the client went away: nothing to close
            self.ls.work_done_progress.end(self.token, T.WorkDoneProgressEnd(message=message))


def cancel(token: str) -> bool:
    """Stop the work behind ``token`` (the client's cancel); False when it is not one of ours or is over."""
    job = _jobs.pop(token, None)
    if job is None or job.done():
        return False
    job.cancel()
    return True
