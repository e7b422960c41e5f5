"""textDocument/didOpen: the buffer joins the session's documents and is checked at once (no debounce)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as T

if TYPE_CHECKING:
    from ..app import NkiLanguageServer


def register(ls: NkiLanguageServer) -> None:
    @ls.feature(T.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: NkiLanguageServer, params: T.DidOpenTextDocumentParams) -> None:
        d = params.text_document
        snap = ls.session.store.open(d.uri, d.version, d.text, d.language_id)
        ls.session.opened(snap)
        ls.scheduler.schedule_static(snap, 0)
