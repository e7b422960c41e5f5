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
from typing import Any

from lsprotocol import types as T
from pygls.exceptions import JsonRpcInternalError
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from . import transport
from .state import ServerState

log = logging.getLogger(__name__)
NAME = "nki-agent"
VERSION = "0.1.0"


MAX_ERROR_CHARS = 300


def one_line_error(error: T.ResponseError) -> T.ResponseError:
    """``error`` as the client sees it: one line of its message (capped), and no traceback in ``data``."""
    lines = [ln.strip() for ln in str(error.message or "").splitlines() if ln.strip()]
    text = lines[-1] if lines and lines[0].startswith("Traceback") else (lines[0] if lines else "")
    if len(text) > MAX_ERROR_CHARS:
        text = text[:MAX_ERROR_CHARS - 1] + "…"
    if not text and error.code == JsonRpcInternalError.CODE:
        text = "internal error (see the NKI Agent log)"
    data = error.data
    if isinstance(data, dict):
        data = {k: v for k, v in data.items() if k != "traceback"} or None
    if data is not None and "Traceback" in str(data):
        data = None
    return T.ResponseError(code=error.code, message=text, data=data)


class NkiProtocol(LanguageServerProtocol):
    """LSP protocol whose document notifications bypass pygls' workspace and whose errors are one line."""

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
        self.state = ServerState(self)

    def report_server_error(self, error: Exception, source: Any) -> None:
        log.error("server error (%s): %s", getattr(source, "__name__", source), error)
        self.state.stats.errors += 1

    def serve_io(self) -> int:
        self._stop_event = threading.Event()
        return transport.start_io(self.protocol, self._stop_event)

    def serve_tcp(self, host: str, port: int) -> None:
        self._stop_event = threading.Event()
        transport.start_tcp(self.protocol, self._stop_event, host, port)


def build() -> NkiLanguageServer:
    """A server with every handler family registered."""
    from .handlers import (
        agent_fix,
        code_actions,
        code_lens,
        commands,
        documents,
        hover,
        inlay_hints,
        introspection,
        kernel_report,
        lifecycle,
    )

    ls = NkiLanguageServer()
    for module in (lifecycle, documents, hover, inlay_hints, code_actions, code_lens, commands, agent_fix,
                   introspection, kernel_report):
        module.register(ls)
    return ls
