"""What the user told us to hide or re-grade: ``# nki: ignore`` comments and the per-code severity setting.

The one place both are read and applied; the language server (before publishing, every tier at once)
and the CLI (``nki-agent check``: text, JSON, SARIF, ``--fix``) call ``apply`` / ``apply_tagged``.

Grammar (ruff's ``# noqa`` is the model):

- ``x = f()  # nki: ignore[code1, code2]`` — those codes' diagnostics starting on this line are hidden;
  ``# nki: ignore`` without brackets hides every diagnostic starting on this line.
- ``# nki: ignore-file[code]`` / ``# nki: ignore-file`` — a comment on its own line at column 0, anywhere in
  the file: those codes (or all) are hidden in the whole file.

A diagnostic is matched by the line it starts on. Comments are found with ``tokenize`` (a ``#`` inside a
string is not a comment); a file that does not tokenize (being typed) is read line by line instead. The
``# nki: a=(256, 512) float32`` shape lines of ``toolchain/taskless/shape_lines.py`` never collide: a shape
line's body starts with ``name=`` or ``name(``, and ``ignore[`` / ``ignore-file`` is prose to it.

Severity: a mapping code → ``error`` | ``warning`` | ``information`` | ``hint`` | ``off`` (``off`` hides the
code everywhere). Imports nothing of LSP; the diagnostics stay the plain model of ``model.py``.
"""

from __future__ import annotations

import io
import os
import re
import tokenize
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal, TypeVar, get_args

from .model import Diagnostic

Level = Literal["error", "warning", "information", "hint", "off"]
LEVELS: tuple[str, ...] = get_args(Level)
# the setting's words -> the model's severities (model.SEVERITIES); "off" hides the code
_MODEL_SEVERITY: dict[str, str | None] = {"error": "error", "warning": "warning", "information": "info",
                                          "hint": "hint", "off": None}
_COMMENT = re.compile(r"#\s*nki:\s*ignore(?P<file>-file)?(?![\w-])(?:\[(?P<codes>[^\]]*)\])?")
_SPLIT = re.compile(r"[\s,]+")

D = TypeVar("D")


@dataclass(frozen=True)
class Ignore:
    """One ignore comment: at ``line`` (1-based), for ``codes`` (empty: every code), file-wide or not."""

    line: int
    column: int
    codes: frozenset[str]
    file: bool

    def covers(self, code: str) -> bool:
        return not self.codes or code in self.codes


def _comments(text: str) -> list[tuple[int, int, str]]:
    """(line, 0-based column, comment text) of every comment of ``text``."""
    try:
        return [(tok.start[0], tok.start[1], tok.string)
                for tok in tokenize.generate_tokens(io.StringIO(text).readline) if tok.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError):  # unfinished text: take every line's first '#'
        out = []
        for n, line in enumerate(text.split("\n"), 1):
            at = line.find("#")
            if at >= 0:
                out.append((n, at, line[at:]))
        return out


@lru_cache(maxsize=16)
def ignores(text: str) -> tuple[Ignore, ...]:
    """Every ``# nki: ignore`` comment of ``text`` (cached by the text: the server asks on every publish)."""
    if "nki:" not in text:
        return ()
    lines = text.split("\n")
    out: list[Ignore] = []
    for line, column, comment in _comments(text):
        m = _COMMENT.search(comment)
        if m is None:
            continue
        codes = frozenset(c for c in _SPLIT.split(m.group("codes") or "") if c)
        file = m.group("file") is not None
        if file and (column != 0 or lines[line - 1][:column].strip()):
            continue  # ignore-file only as its own top-level line; anything else would be a surprise
        out.append(Ignore(line, column + m.start(), codes, file))
    return tuple(out)


def _same_file(a: str, b: str) -> bool:
    return not a or not b or a == b or os.path.abspath(a) == os.path.abspath(b)


def suppressed(d: Diagnostic, found: Sequence[Ignore], path: str) -> bool:
    """Whether an ignore comment of the file at ``path`` hides ``d``."""
    if not _same_file(d.path, path):
        return False
    return any(i.covers(d.code) and (i.file or i.line == d.line) for i in found)


def apply_tagged(tagged: Sequence[tuple[str, int, Diagnostic]], text: str, path: str,
                 severity: Mapping[str, str]) -> list[tuple[str, int, Diagnostic]]:
    """``tagged`` (tier, index, diagnostic) without what ``text``'s comments or ``severity`` hide, each
    re-graded as ``severity`` says; the tags are kept (code actions find a diagnostic by its index)."""
    found = ignores(text)
    out: list[tuple[str, int, Diagnostic]] = []
    for tier, k, d in tagged:
        if suppressed(d, found, path):
            continue
        level = severity.get(d.code)
        if level is not None:
            sev = _MODEL_SEVERITY.get(level, d.severity)
            if sev is None:
                continue
            if sev != d.severity:
                d = replace(d, severity=sev)
        out.append((tier, k, d))
    return out


def apply(diagnostics: Sequence[Diagnostic], text: str, path: str,
          severity: Mapping[str, str]) -> list[Diagnostic]:
    """``diagnostics`` of the file at ``path`` (its ``text``) as the user wants them shown."""
    return [d for _, _, d in apply_tagged([("", k, d) for k, d in enumerate(diagnostics)], text, path, severity)]


def parse_levels(pairs: Sequence[str]) -> dict[str, str]:
    """``CODE=LEVEL`` words (the CLI's ``--severity``) as a mapping; ValueError names the bad one."""
    out: dict[str, str] = {}
    for pair in pairs:
        code, sep, level = pair.partition("=")
        code, level = code.strip(), level.strip().lower()
        if not sep or not code:
            raise ValueError(f"{pair!r}: expected CODE=LEVEL")
        if level not in LEVELS:
            raise ValueError(f"{pair!r}: level must be one of {', '.join(LEVELS)}")
        out[code] = level
    return out


def check_levels(raw: object, where: str) -> dict[str, str]:
    """A severity mapping read from a file (``[tool.nki-agent] severity``), validated; ValueError says where."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: severity must be a table of code = level")
    return parse_levels([f"{k}={v}" for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)]
                        + [f"{k}=<not a string>" for k, v in raw.items() if not isinstance(v, str)])
