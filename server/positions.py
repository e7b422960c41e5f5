"""Positions: LSP (0-based line, UTF-16 code units) <-> our model (1-based line, 1-based code points).

LSP clients count characters in UTF-16 code units unless another position encoding is negotiated;
the diagnostics model and Python's ``str`` count code points. A character outside the Basic
Multilingual Plane (an emoji, U+1F600) is one code point but two UTF-16 units. Every conversion
between the two worlds goes through this module; nothing else does position arithmetic.

Lines are split the way LSP splits them (``\\n``, ``\\r\\n`` or ``\\r``). A character offset past the end
of a line means the end of that line, a line past the end of the document means the end of the
document (the LSP rule); an offset that falls between the two halves of a surrogate pair snaps to the
start of that character.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE_END = re.compile(r"\r\n|\r|\n")


def line_starts(text: str) -> list[int]:
    """Code-point offset of the first character of every line (LSP line breaks)."""
    starts = [0]
    starts.extend(m.end() for m in _LINE_END.finditer(text))
    return starts


def utf16_len(s: str) -> int:
    """Length of ``s`` in UTF-16 code units."""
    return len(s) + sum(1 for ch in s if ord(ch) > 0xFFFF)


def utf16_to_index(line: str, units: int) -> int:
    """Code-point index in ``line`` of a UTF-16 column (clamped to the line)."""
    if units <= 0:
        return 0
    if line.isascii():
        return min(units, len(line))
    count = 0
    for i, ch in enumerate(line):
        width = 2 if ord(ch) > 0xFFFF else 1
        if count + width > units:
            return i  # inside a surrogate pair: snap to the character's start
        count += width
        if count == units:
            return i + 1
    return len(line)


def index_to_utf16(line: str, index: int) -> int:
    """UTF-16 column of a code-point index in ``line`` (clamped to the line)."""
    index = max(0, min(index, len(line)))
    head = line[:index]
    return index if head.isascii() else utf16_len(head)


@dataclass(frozen=True)
class LineIndex:
    """Line table of one text, for offset <-> position conversion."""

    text: str
    starts: tuple[int, ...]

    @classmethod
    def of(cls, text: str) -> LineIndex:
        return cls(text, tuple(line_starts(text)))

    def line_text(self, line: int) -> str:
        """Content of 0-based ``line`` without its line break ('' past the end)."""
        if line < 0 or line >= len(self.starts):
            return ""
        start = self.starts[line]
        end = self.starts[line + 1] if line + 1 < len(self.starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")

    def offset(self, line: int, utf16_character: int) -> int:
        """Code-point offset in the text of an LSP position (clamped per the LSP rules)."""
        if line < 0:
            return 0
        if line >= len(self.starts):
            return len(self.text)
        return self.starts[line] + utf16_to_index(self.line_text(line), utf16_character)

    def position(self, offset: int) -> tuple[int, int]:
        """LSP (line, UTF-16 character) of a code-point offset."""
        offset = max(0, min(offset, len(self.text)))
        lo, hi = 0, len(self.starts) - 1
        while lo < hi:  # last line start <= offset
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        line_text = self.line_text(lo)
        return lo, index_to_utf16(line_text, offset - self.starts[lo])


def to_lsp(lines: list[str], line1: int, column1: int) -> tuple[int, int]:
    """A model position (1-based line, 1-based code-point column) as an LSP (line, UTF-16 character).

    ``lines`` is the text split on ``\\n`` (what the diagnostics model counts); a trailing ``\\r`` is
    part of no column a diagnostic can point at.
    """
    line0 = max(0, line1 - 1)
    if line0 >= len(lines):
        return (max(0, len(lines) - 1), utf16_len(lines[-1].rstrip("\r")) if lines else 0)
    text = lines[line0].rstrip("\r")
    return line0, index_to_utf16(text, column1 - 1)


def from_lsp(lines: list[str], line0: int, character: int) -> tuple[int, int]:
    """An LSP position as a model (1-based line, 1-based code-point column)."""
    if line0 < 0:
        return 1, 1
    if line0 >= len(lines):
        last = lines[-1] if lines else ""
        return max(1, len(lines)), len(last.rstrip("\r")) + 1
    return line0 + 1, utf16_to_index(lines[line0].rstrip("\r"), character) + 1
