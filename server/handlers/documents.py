"""didOpen / didChange / didSave / didClose: keep the session's documents in sync and schedule the tiers.

Runs on the event loop and stays fast: applying an edit is string slicing; analyses are scheduled
(static: at once, or debounced while checks are slower than typing; simulation/verification: on save)
and run elsewhere. A change that makes the buffer a text the fix agent verified (Accept of its fix)
gives the document the agent's verification (``Session.changed``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from lsprotocol import types as T

from ..documents import ChangeRange

if TYPE_CHECKING:
    from ..app import NkiLanguageServer


def _changes(params: T.DidChangeTextDocumentParams) -> list[tuple[ChangeRange, str]]:
    out: list[tuple[ChangeRange, str]] = []
    for c in params.content_changes:
        rng = getattr(c, "range", None)
        if rng is None:
            out.append((None, c.text))
        else:
            out.append(((rng.start.line, rng.start.character, rng.end.line, rng.end.character), c.text))
    return out


def register(ls: NkiLanguageServer) -> None:
    @ls.feature(T.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: NkiLanguageServer, params: T.DidOpenTextDocumentParams) -> None:
        d = params.text_document
        snap = ls.session.store.open(d.uri, d.version, d.text, d.language_id)
        ls.session.opened(snap)
        ls.scheduler.schedule_static(snap, 0)

    @ls.feature(T.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: NkiLanguageServer, params: T.DidChangeTextDocumentParams) -> None:
        d = params.text_document
        snap = ls.session.store.change(d.uri, d.version, _changes(params))
        if snap is not None:
            had = ls.session.doc(d.uri).runs.get("verify")
            ls.session.changed(snap, asyncio.get_running_loop().time())
            ls.scheduler.schedule_static(snap)
            if ls.session.doc(d.uri).runs.get("verify") is not had:  # the agent's verified text
                ls.scheduler.refresh_views()

    @ls.feature(T.TEXT_DOCUMENT_DID_SAVE, T.SaveOptions(include_text=False))
    def did_save(ls: NkiLanguageServer, params: T.DidSaveTextDocumentParams) -> None:
        snap = ls.session.store.get(params.text_document.uri)
        if snap is not None:
            ls.scheduler.on_save(snap)

    @ls.feature(T.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: NkiLanguageServer, params: T.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.scheduler.cancel_document(uri)
        ls.session.close(uri)
        ls.publisher.clear(uri)
