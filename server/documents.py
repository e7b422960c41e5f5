"""The document store: the text of every open buffer, and nothing else.

The server analyses only what the editor has open (``didOpen``/``didChange``/``didClose``); it never
reads a kernel from disk. Each document carries the client's ``version`` and a server-wide
``revision`` that grows with every accepted change: analyses are computed on a ``Snapshot`` and their
result is published only if the document's revision has not moved on (see ``scheduler``).

Versions never go backwards: a change whose version is not greater than the current one is rejected
(logged, text untouched), as ruff's ``TextDocument`` asserts. Documents larger than ``MAX_DOC_BYTES``
are still kept in sync (the editor will keep sending edits) but marked ``too_large``: they get one
informational diagnostic and no analysis.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace
from urllib.parse import unquote, urlparse

from .positions import LineIndex

log = logging.getLogger(__name__)

MAX_DOC_BYTES = 5 * 1024 * 1024  # a kernel is KBs; 5 MB of "kernel" is generated data, not something to check live

# (start_line, start_utf16, end_line, end_utf16) or None for a whole-document replacement
ChangeRange = tuple[int, int, int, int] | None

_revisions = itertools.count(1)


@dataclass(frozen=True)
class Snapshot:
    """An immutable view of one open document (safe to hand to a worker thread)."""

    uri: str
    version: int
    text: str
    revision: int
    language_id: str = "python"

    @property
    def path(self) -> str:
        return uri_to_path(self.uri)

    @property
    def too_large(self) -> bool:
        return len(self.text) > MAX_DOC_BYTES or len(self.text.encode("utf-8", "surrogatepass")) > MAX_DOC_BYTES


def uri_to_path(uri: str) -> str:
    """Filesystem path of a ``file:`` URI (other schemes: the URI's path part)."""
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme in ("file", "") else unquote(parsed.path or uri)


def apply_change(text: str, rng: ChangeRange, new_text: str) -> str:
    """Text after one LSP content change (UTF-16 range, clamped per the LSP rules)."""
    if rng is None:
        return new_text
    # the usual text has only "\n" breaks: index just the lines the range reads (a 5,000-line table costs ms)
    index = LineIndex.of(text) if "\r" in text else _line_index_to(text, max(rng[0], rng[2]))
    start = index.offset(rng[0], rng[1])
    end = index.offset(rng[2], rng[3])
    if end < start:  # an inverted range: treat as the span between the two positions
        start, end = end, start
    return text[:start] + new_text + text[end:]


def _line_index_to(text: str, line: int) -> LineIndex:
    """The line table of a ``\n``-only text as far as positions on ``line`` need it (its start and the next
    line's), or to the end of a shorter text: ``offset`` answers as with the full table."""
    starts = [0]
    while len(starts) <= line + 1:
        nl = text.find("\n", starts[-1])
        if nl < 0:
            break
        starts.append(nl + 1)
    return LineIndex(text, tuple(starts))


class DocumentStore:
    """uri -> Snapshot for open documents. Mutated only on the event-loop thread."""

    def __init__(self) -> None:
        self._docs: dict[str, Snapshot] = {}

    def open(self, uri: str, version: int, text: str, language_id: str = "python") -> Snapshot:
        snap = Snapshot(uri, version, text, next(_revisions), language_id)
        self._docs[uri] = snap
        return snap

    def change(self, uri: str, version: int, changes: Iterable[tuple[ChangeRange, str]]) -> Snapshot | None:
        """Apply changes in order; None (and no change) if the document is unknown or the version regressed."""
        cur = self._docs.get(uri)
        if cur is None:
            log.warning("didChange for a document that is not open: %s", uri)
            return None
        if version <= cur.version:
            log.warning("rejected didChange for %s: version %s is not after %s", uri, version, cur.version)
            return None
        text = cur.text
        for rng, new_text in changes:
            text = apply_change(text, rng, new_text)
        snap = replace(cur, version=version, text=text, revision=next(_revisions))
        self._docs[uri] = snap
        return snap

    def close(self, uri: str) -> None:
        self._docs.pop(uri, None)

    def get(self, uri: str) -> Snapshot | None:
        return self._docs.get(uri)

    def is_current(self, snap: Snapshot) -> bool:
        cur = self._docs.get(snap.uri)
        return cur is not None and cur.revision == snap.revision

    def uris(self) -> list[str]:
        return list(self._docs)
