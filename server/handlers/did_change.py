"""textDocument/didChange: apply the edits to the session's document and schedule the static tier.

Runs on the event loop and stays fast: applying an edit is string slicing; the check is scheduled (at once,
or debounced while checks are slower than typing) and runs elsewhere. A change that makes the buffer a text
the fix agent verified (Accept of its fix) gives the document the agent's verification (``Session.changed``).
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
