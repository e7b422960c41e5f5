"""Model -> LSP conversion: ``Diagnostic`` to ``lsprotocol`` diagnostics, ``TextEdit`` to LSP edits.

Every published diagnostic carries its error code, a ``codeDescription`` link to the documentation,
and ``relatedInformation`` (the model's related locations, or else one pointing at the enclosing
kernel so the Problems panel always says where the error belongs). ``data`` keeps the index of the
diagnostic in its analysis so code actions can find its verified fixes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from lsprotocol import types as T
from pygls.uris import from_fs_path

from ..diagnostics.model import Diagnostic, TextEdit
from .positions import from_lsp, to_lsp

SEVERITY = {"error": T.DiagnosticSeverity.Error, "warning": T.DiagnosticSeverity.Warning,
            "info": T.DiagnosticSeverity.Information, "hint": T.DiagnosticSeverity.Hint}
_DEF = re.compile(r"^\s*(?:async\s+)?def\s+(\w+)")


def lsp_range(lines: list[str], line: int, column: int, end_line: int, end_column: int) -> T.Range:
    sl, sc = to_lsp(lines, line, column)
    el, ec = to_lsp(lines, end_line, end_column)
    el, ec = max((el, ec), (sl, sc))
    return T.Range(T.Position(sl, sc), T.Position(el, ec))


def model_position(lines: list[str], pos: T.Position) -> tuple[int, int]:
    return from_lsp(lines, pos.line, pos.character)


def enclosing_def(lines: list[str], line1: int) -> tuple[int, str] | None:
    """(1-based line, name) of the nearest ``def`` at or above ``line1``."""
    for k in range(min(line1, len(lines)) - 1, -1, -1):
        m = _DEF.match(lines[k])
        if m:
            return k + 1, m.group(1)
    return None


def to_lsp_diagnostic(d: Diagnostic, lines: list[str], uri: str, path_to_uri: Callable[[str], str | None],
                      data: Any = None) -> T.Diagnostic:
    """One model diagnostic for the document ``uri`` (whose text is ``lines``)."""
    related: list[T.DiagnosticRelatedInformation] = []
    for r in d.related:
        target = path_to_uri(r.path) if r.path else uri
        if target is None:
            continue
        rl = lines if target == uri else []
        rng = lsp_range(rl, r.line, r.column, r.line, r.column) if rl else \
            T.Range(T.Position(max(0, r.line - 1), max(0, r.column - 1)), T.Position(max(0, r.line - 1), max(0, r.column - 1)))
        related.append(T.DiagnosticRelatedInformation(T.Location(target, rng), r.message))
    if not related:
        where = enclosing_def(lines, d.line)
        if where is not None:
            rng = lsp_range(lines, where[0], 1, where[0], len(lines[where[0] - 1]) + 1)
            related.append(T.DiagnosticRelatedInformation(T.Location(uri, rng), f"in `{where[1]}`"))
        else:
            related.append(T.DiagnosticRelatedInformation(
                T.Location(uri, lsp_range(lines, d.line, d.column, d.end_line, d.end_column)), d.code))
    return T.Diagnostic(
        range=lsp_range(lines, d.line, d.column, d.end_line, d.end_column),
        message=d.message,
        severity=SEVERITY.get(d.severity, T.DiagnosticSeverity.Error),
        code=d.code,
        code_description=T.CodeDescription(href=d.doc_url) if d.doc_url else None,
        source=d.source,
        related_information=related,
        data=data,
    )


def to_lsp_edit(e: TextEdit, lines: list[str]) -> T.TextEdit:
    return T.TextEdit(range=lsp_range(lines, e.line, e.column, e.end_line, e.end_column), new_text=e.new_text)


def file_uri(path: str) -> str:
    return from_fs_path(path) or f"file://{path}"
