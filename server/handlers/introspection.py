"""Custom requests for tests and tools: ``nki/documentText`` (the store's view of a buffer) and ``nki/stats``."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..app import NkiLanguageServer

DOCUMENT_TEXT = "nki/documentText"
STATS = "nki/stats"


def _get(params: Any, key: str) -> Any:
    if isinstance(params, dict):
        return params.get(key)
    return getattr(params, key, None)


def register(ls: NkiLanguageServer) -> None:
    @ls.feature(DOCUMENT_TEXT)
    def document_text(ls: NkiLanguageServer, params: Any) -> dict[str, Any] | None:
        uri = _get(params, "uri")
        snap = ls.session.store.get(uri) if isinstance(uri, str) else None
        if snap is None:
            return None
        return {"uri": snap.uri, "version": snap.version, "text": snap.text}

    @ls.feature(STATS)
    def stats(ls: NkiLanguageServer, params: Any) -> dict[str, Any]:
        return asdict(ls.session.stats) | {"documents": len(ls.session.store.uris())}
