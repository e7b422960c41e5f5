"""didOpen / didChange / didSave / didClose: keep the store in sync and schedule the tiers.

Runs on the event loop and stays fast: applying an edit is string slicing; analyses are scheduled
(static: debounced; simulation/verification: on save) and run elsewhere.
"""

from __future__ import annotations

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
        snap = ls.state.store.open(d.uri, d.version, d.text, d.language_id)
        ls.state.doc(d.uri).runs.clear()
        ls.state.schedule_static(snap, 0)

    @ls.feature(T.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: NkiLanguageServer, params: T.DidChangeTextDocumentParams) -> None:
        d = params.text_document
        snap = ls.state.store.change(d.uri, d.version, _changes(params))
        if snap is not None:
            ls.state.schedule_static(snap)

    @ls.feature(T.TEXT_DOCUMENT_DID_SAVE, T.SaveOptions(include_text=False))
    def did_save(ls: NkiLanguageServer, params: T.DidSaveTextDocumentParams) -> None:
        snap = ls.state.store.get(params.text_document.uri)
        if snap is not None:
            ls.state.on_save(snap)

    @ls.feature(T.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: NkiLanguageServer, params: T.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.state.store.close(uri)
        ls.state.clear(uri)
