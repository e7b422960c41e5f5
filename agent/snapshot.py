"""Edits that never lose text: the agent's snapshot of a document and the one minimal edit it returns.

The agent works on ``Snapshot(uri, version, text)``. Its result is a single replacement of the
smallest span that differs (common prefix and suffix kept), expressed against that version, so
the client applies it only when the document is still at ``version`` (``apply_if_current``) and
one undo restores the previous text. Offsets are Python string indices; the server converts them
to LSP positions.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass


@dataclass(frozen=True)
class Snapshot:
    uri: str
    version: int | None
    text: str


@dataclass(frozen=True)
class Edit:
    """Replace ``text[start:end]`` of the snapshot with ``new_text``."""

    start: int
    end: int
    new_text: str

    def apply(self, text: str) -> str:
        return text[: self.start] + self.new_text + text[self.end:]


def minimal_edit(old: str, new: str) -> Edit | None:
    """The smallest single replacement turning ``old`` into ``new`` (None when they are equal).

    The span is widened to whole lines, line breaks included, so the edit reads as a line diff and
    never splits a surrogate pair or a CRLF."""
    if old == new:
        return None
    limit = min(len(old), len(new))
    p = 0
    while p < limit and old[p] == new[p]:
        p += 1
    s = 0
    while s < limit - p and old[len(old) - 1 - s] == new[len(new) - 1 - s]:
        s += 1
    p = old.rfind("\n", 0, p) + 1  # back to the start of the line
    old_end, new_end = len(old) - s, len(new) - s
    nl_old = old.find("\n", old_end)  # forward past the line break (both texts share this suffix), so a
    extra = (len(old) if nl_old < 0 else nl_old + 1) - old_end  # CRLF is never split between \r and \n
    return Edit(p, old_end + extra, new[p: new_end + extra])


def unified_diff(old: str, new: str, path: str = "kernel.py", context: int = 3) -> str:
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile=f"a/{path}", tofile=f"b/{path}", n=context)
    return "".join(x if x.endswith("\n") else x + "\n" for x in lines)


def apply_if_current(current: Snapshot, base: Snapshot, edit: Edit) -> str | None:
    """The new text if ``current`` is still the snapshot the edit was computed against, else None
    (the user typed meanwhile: the edit is stale and must not be applied)."""
    if current.uri != base.uri or current.text != base.text:
        return None
    if base.version is not None and current.version != base.version:
        return None
    return edit.apply(current.text)
