"""textDocument/didClose: the document's tasks are cancelled (a running simulation's worker is killed), its
state dropped and its diagnostics cleared."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as T

if TYPE_CHECKING:
    from ..app import NkiLanguageServer


def register(ls: NkiLanguageServer) -> None:
    @ls.feature(T.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: NkiLanguageServer, params: T.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.scheduler.cancel_document(uri)
        ls.session.close(uri)
        ls.publisher.clear(uri)
