"""The remote runner as the language server sees it: one client per URL and token, runs on save, status.

With ``verifyOnSave: "remote"`` (or a runner URL and the Verify command) a save sends the buffer, its
task and sibling modules to the runner at ``runnerUrl`` as a profile job (correctness on the runner's
backend + latency), with LSP work-done progress while it runs. Its problems and wrong results become
``nki-runner`` diagnostics; its latency goes to the code lens and the kernel's hover. A runner that is
unreachable, refuses the token or stays busy produces ONE message per outage (never diagnostics);
the next successful run re-arms the message. The token comes from ``runnerTokenFile`` or
``NKI_AGENT_RUNNER_TOKEN`` in the server's environment (which ``nki/runnerToken`` updates, so a new token
takes effect without a restart, ``handlers/runner_token.py``) and is never logged; it goes only to the
``runnerUrl`` of the launch options (machine-scoped: a workspace's settings cannot name the URL,
``handlers/runner_token.py``). A job carries only files inside the workspace folders (``analysis.run``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import TYPE_CHECKING

from lsprotocol import types as T

from ..runner.config import TOKEN_ENV
from ..runner.token_file import TokenFileError, read_token_file
from . import analysis
from .analysis import RunResult
from .documents import Snapshot
from .tasks import TaskRef

if TYPE_CHECKING:
    from ..runner.client import RemoteRunner
    from .app import NkiLanguageServer

log = logging.getLogger(__name__)
OUTAGE = "runner-outage"


def read_token(path: str) -> str | None:
    """The token in ``runnerTokenFile`` (None without one; an unusable file is logged, never its content,
    and the runner then answers "wrong or missing token" — the one message the user sees)."""
    if not path:
        return None
    try:
        return read_token_file(path)
    except TokenFileError as e:
        log.warning("runnerTokenFile: %s", e)
        return None


class Remote:
    def __init__(self, server: NkiLanguageServer) -> None:
        self.server = server
        self._client: RemoteRunner | None = None
        self._key: tuple[str, str | None] | None = None

    def client(self) -> RemoteRunner | None:
        """The runner client for the current settings (None when no runner URL is set)."""
        settings = self.server.session.settings
        if not settings.runner_url:
            return None
        token = read_token(settings.runner_token_file)
        key = (settings.runner_url, token if token is not None else os.environ.get(TOKEN_ENV))
        if self._client is None or self._key != key:
            from ..runner.client import RemoteRunner

            if self._client is not None:
                self._client.close()
            self._client = RemoteRunner(key[0], token=key[1], timeout=30.0)
            self._key = key
        return self._client

    async def run(self, snap: Snapshot, task: TaskRef) -> RunResult | None:
        """Verify and time ``snap`` on the runner; publish if still current. None when it did not run."""
        from ..runner.client import RunnerError

        client = self.client()
        if client is None:
            return None
        from .progress import progress_token

        server = self.server
        session = server.session
        token = await progress_token(server)
        if token is not None:
            server.work_done_progress.begin(token, T.WorkDoneProgressBegin(
                title="NKI: verifying on the runner", message=client.url, cancellable=False))
        loop = asyncio.get_running_loop()
        stop = threading.Event()
        outcome = "done"
        try:
            result = await loop.run_in_executor(server.scheduler.run_pool, analysis.run, "remote", snap, task,
                                                session.settings, stop, client, session.task_roots(snap))
        except asyncio.CancelledError:
            stop.set()
            outcome = "cancelled"
            return None
        except analysis.OutsideWorkspace as e:
            outcome = "not sent"
            log.warning("runner job not sent for %s: %s", snap.path, e)
            return None
        except RunnerError as e:
            outcome = "runner unavailable"
            server.scheduler.show_once(OUTAGE, f"NKI Agent: {e} — on-save verification used the embedded simulator only; "
                                 "it retries on the next save.", T.MessageType.Warning)
            return None
        except Exception:
            outcome = "failed"
            log.exception("remote run failed for %s", snap.uri)
            session.stats.errors += 1
            return None
        finally:
            if token is not None:
                server.work_done_progress.end(token, T.WorkDoneProgressEnd(message=outcome))
        session.notified.discard(OUTAGE)  # the runner answers again: a later outage is reported again
        session.stats.sim_runs += 1
        if not session.store_run(snap.uri, result):
            return result
        if session.store.is_current(snap):
            server.publisher.publish(snap.uri)
        else:
            session.stats.stale_dropped += 1
        server.scheduler.refresh_views()
        return result

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
