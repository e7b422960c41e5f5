"""Placing findings in the user's kernel source: quoted code text, tensor names, function and kernel ``def``s.

Pure text scanning (no ``ast``), bounded, so deeply nested or huge sources cannot hurt. Lines and
columns are 1-based; a span covers the line's code without its indentation.
"""

from __future__ import annotations

import os
import re

from ...toolchain.source_facts import KERNEL_DECORATORS

# Kernels are hundreds of lines; scanning more than this is never useful and bounds the work.
MAX_SOURCE_LINES = 20_000
MAX_SOURCE_LINE = 1_000

# the kernel decorators of source_facts, with a bounded prefix (log-side scans must stay linear)
_DECORATOR = re.compile(r"^\s*@\s*[\w.]{0,100}\b(" + "|".join(KERNEL_DECORATORS) + r")\b")
_DEF = re.compile(r"^\s*(?:async\s+)?def\s+(?P<name>\w+)")

Span = tuple[int, int, int, int]  # line, column, end_line, end_column


class Source:
    """The user's kernel file as lines, with the look-ups the parsers need."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.lines = [ln[:MAX_SOURCE_LINE] for ln in text.splitlines()[:MAX_SOURCE_LINES]]

    def same_file(self, other: str) -> bool:
        """Whether a path printed in the output is this file (logs come from other hosts: compare names)."""
        return os.path.basename(other.replace("\\", "/")) == os.path.basename(self.path.replace("\\", "/"))

    def span(self, line: int, column: int | None = None) -> Span:
        """The code on ``line`` (from ``column`` if given), or a 1-character span if the line is not in the file."""
        if 1 <= line <= len(self.lines):
            text = self.lines[line - 1]
            start = column if column else len(text) - len(text.lstrip()) + 1
            end = len(text.rstrip()) + 1
            return line, start, line, max(end, start + 1)
        col = column or 1
        return line, col, line, col + 1

    def find_code(self, code_text: str) -> int | None:
        """Line of the first source line whose code equals (or else contains) the quoted text."""
        needle = code_text.strip()
        if len(needle) < 3:
            return None
        for i, ln in enumerate(self.lines):
            if ln.strip() == needle:
                return i + 1
        for i, ln in enumerate(self.lines):
            if needle in ln:
                return i + 1
        return None

    def find_tensor(self, name: str) -> int | None:
        """Line creating tensor ``name``: ``name="name"`` in a call first, then an assignment to the variable."""
        quoted = re.compile(r"\bname\s*=\s*['\"]" + re.escape(name) + r"['\"]")
        assign = re.compile(r"^\s*" + re.escape(name) + r"\s*(?::[^=]{0,200})?=(?!=)")
        for i, ln in enumerate(self.lines):
            if quoted.search(ln):  # a call spanning lines: blame its statement if it starts just above
                for j in range(i, max(-1, i - 6), -1):
                    if assign.search(self.lines[j]):
                        return j + 1
                return i + 1
        for i, ln in enumerate(self.lines):
            if assign.search(ln):
                return i + 1
        return None

    def find_def(self, name: str) -> int | None:
        for i, ln in enumerate(self.lines):
            m = _DEF.match(ln)
            if m and m["name"] == name:
                return i + 1
        return None

    def kernel_def(self) -> int | None:
        """Line of the first decorated kernel ``def`` (else the first ``def``)."""
        decorated = False
        first: int | None = None
        for i, ln in enumerate(self.lines):
            if _DECORATOR.match(ln):
                decorated = True
                continue
            m = _DEF.match(ln)
            if m:
                if decorated:
                    return i + 1
                first = first or i + 1
            elif ln.strip() and not ln.lstrip().startswith(("@", "#")):
                decorated = decorated and ln.startswith((" ", "\t", ")"))
        return first
