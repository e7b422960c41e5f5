"""textDocument/hover: the Markdown of ``diagnostics.views.hover`` for the document's view at the position
(tensors, kernel parameters, NKI calls, the cost model's figures, error codes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as T

from ...diagnostics.views import hover as view
from ..positions import utf16_to_index
from ..views import document_view

if TYPE_CHECKING:
    from ..app import NkiLanguageServer


def register(ls: NkiLanguageServer) -> None:
    @ls.feature(T.TEXT_DOCUMENT_HOVER)
    async def hover(ls: NkiLanguageServer, params: T.HoverParams) -> T.Hover | None:
        snap = ls.session.store.get(params.text_document.uri)
        if snap is None or snap.too_large:
            return None
        lines = snap.text.split("\n")
        line0 = params.position.line
        if not 0 <= line0 < len(lines):
            return None
        index = utf16_to_index(lines[line0].rstrip("\r"), params.position.character)
        md = view.markdown(await document_view(ls, snap, diagnostics=True), line0, index)
        if md is None:
            return None
        return T.Hover(contents=T.MarkupContent(kind=T.MarkupKind.Markdown, value=md))
