"""textDocument/inlayHint: the hints of ``diagnostics.views.inlay`` for the requested lines, as LSP hints
(tensor facts as ``Type`` hints, trip counts as ``Parameter`` hints, the estimate's loop shares without a kind)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as T

from ...diagnostics.views import inlay
from ..positions import to_lsp
from ..views import document_view

if TYPE_CHECKING:
    from ..app import NkiLanguageServer

KINDS = {"type": T.InlayHintKind.Type, "parameter": T.InlayHintKind.Parameter}


def register(ls: NkiLanguageServer) -> None:
    @ls.feature(T.TEXT_DOCUMENT_INLAY_HINT)
    async def inlay_hints(ls: NkiLanguageServer, params: T.InlayHintParams) -> list[T.InlayHint]:
        snap = ls.session.store.get(params.text_document.uri)
        if snap is None or snap.too_large:
            return []
        view = await document_view(ls, snap)
        lines = view.lines
        out = []
        for h in inlay.hints(view, params.range.start.line + 1, params.range.end.line + 1, ls.session.settings.cost_hints):
            pl, pc = to_lsp(lines, h.line, h.column)
            out.append(T.InlayHint(position=T.Position(pl, pc), label=h.label, kind=KINDS.get(h.kind),
                                   tooltip=h.tooltip, padding_left=h.padding_left if h.kind != "parameter" else None))
        return out
