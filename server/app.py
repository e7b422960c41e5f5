"""The ``LanguageServer`` instance: protocol overrides, error funnel, and handler registration.

- Documents live in our own ``DocumentStore``: the protocol's built-in didOpen/didChange/didClose
  skip pygls' workspace (which would read unknown URIs from disk and accepts versions going
  backwards) and go straight to ``handlers.documents``.
- ``report_server_error`` logs instead of popping a ``showMessage`` per failure; request handlers
  that raise still get a JSON-RPC error response (pygls), and the server stays up.
- Error replies carry no traceback: every JSON-RPC error the server sends is one line (``one_line_error``;
  pygls would put the handler's traceback in ``error.data`` and a multi-line message); the traceback goes
  to the server's log only (pygls logs it with the request).
- Transport: ``transport.read_loop`` (size caps, one answer per request, malformed frames survive).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lsprotocol import types as T
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from . import transport
from .publish import Publisher
from .scheduler import Scheduler
from .session import Session
from .transport import one_line_error

log = logging.getLogger(__name__)
NAME = "nki-agent"
VERSION = "0.1.0"


class NkiProtocol(LanguageServerProtocol):
    """LSP protocol whose document notifications bypass pygls' workspace and whose errors are one line.

    Two pygls internals are overridden because pygls has no public hook for them: ``_send_response`` (the
    only place every error reply passes: handler exceptions become one-line errors there) and the built-in
    didOpen/didChange/didClose methods (``lsp_method``; pygls' workspace would read unknown URIs from disk
    and accept versions going backwards, so documents live in ``session.Session.store``). pygls is pinned
    below its next major (pyproject.toml) so these stay what they are."""

    def _send_response(self, msg_id: Any, result: Any | None = None, error: T.ResponseError | None = None) -> None:
        if error is not None:
            error = one_line_error(error)
        super()._send_response(msg_id, result, error)

    def _user(self, method: str, params: Any) -> Generator[Any, Any, None]:
        if (handler := self.fm.features.get(method)) is not None:
            yield handler, (params,), None

    @lsp_method(T.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: T.DidOpenTextDocumentParams) -> Generator[Any, Any, None]:
        yield from self._user(T.TEXT_DOCUMENT_DID_OPEN, params)

    @lsp_method(T.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: T.DidChangeTextDocumentParams) -> Generator[Any, Any, None]:
        yield from self._user(T.TEXT_DOCUMENT_DID_CHANGE, params)

    @lsp_method(T.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: T.DidCloseTextDocumentParams) -> Generator[Any, Any, None]:
        yield from self._user(T.TEXT_DOCUMENT_DID_CLOSE, params)


class NkiLanguageServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(NAME, VERSION, T.TextDocumentSyncKind.Incremental, None, protocol_cls=NkiProtocol)
        static_pool = ThreadPoolExecutor(2, thread_name_prefix="nki-static")
        self.session = Session(static_pool)
        self.publisher = Publisher(self, self.session)
        self.scheduler = Scheduler(self, self.session, self.publisher, static_pool)

    def report_server_error(self, error: Exception, source: Any) -> None:
        log.error("server error (%s): %s", getattr(source, "__name__", source), error)
        self.session.stats.errors += 1

    def serve_io(self) -> int:
        self.stopped = threading.Event()
        return transport.start_io(self.protocol, self.stopped)

    def serve_tcp(self, host: str, port: int) -> None:
        self.stopped = threading.Event()
        transport.start_tcp(self.protocol, self.stopped, host, port)


def build() -> NkiLanguageServer:
    """A server with every handler registered (one module per LSP method, a few per method family)."""
    from .handlers import (
        agent_fix,
        code_actions,
        code_lens,
        commands,
        did_change,
        did_close,
        did_open,
        did_save,
        hover,
        inlay_hints,
        introspection,
        kernel_report,
        lifecycle,
        runnables,
        runner_token,
        workspace_folders,
    )

    ls = NkiLanguageServer()
    for module in (lifecycle, workspace_folders, runner_token, did_open, did_change, did_save, did_close, hover, inlay_hints, code_actions, code_lens, commands,
                   runnables, agent_fix, introspection, kernel_report):
        module.register(ls)
    return ls
