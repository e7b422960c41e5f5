"""textDocument/didSave: the run tier of the saved revision (``Scheduler.on_save``: simulate, verify or the
runner, by the settings; kept until the server is ready when it comes in while the server starts)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lsprotocol import types as T

if TYPE_CHECKING:
    from ..app import NkiLanguageServer

log = logging.getLogger(__name__)


def register(ls: NkiLanguageServer) -> None:
    @ls.feature(T.TEXT_DOCUMENT_DID_SAVE, T.SaveOptions(include_text=False))
    def did_save(ls: NkiLanguageServer, params: T.DidSaveTextDocumentParams) -> None:
        snap = ls.session.store.get(params.text_document.uri)
        if snap is None:
            log.warning("didSave for a document that is not open (nothing run): %s", params.text_document.uri)
            return
        ls.scheduler.on_save(snap)
