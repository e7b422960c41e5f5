"""Applying and re-checking quick fixes (deterministic edits, no LLM).

A fix is offered only if, applied to the current text, it removes the diagnostic it belongs to and
adds no new one (``verified_fixes``). Edits use the diagnostic model's 1-based character positions.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

from .model import Diagnostic, Fix, TextEdit


def _offset(lines: list[str], line: int, column: int) -> int:
    return sum(len(x) + 1 for x in lines[: line - 1]) + column - 1


def apply_edits(text: str, edits: tuple[TextEdit, ...] | list[TextEdit]) -> str:
    """Apply non-overlapping edits (given against ``text``) all at once."""
    lines = text.split("\n")
    spans = sorted(((_offset(lines, e.line, e.column), _offset(lines, e.end_line, e.end_column), e.new_text)
                    for e in edits), reverse=True)
    last = len(text) + 1
    for start, end, new in spans:
        if end > last or start > end:
            raise ValueError("overlapping or inverted edits")
        text = text[:start] + new + text[end:]
        last = start
    return text


def verified_fixes(path: str, text: str, diagnostics: list[Diagnostic],
                   check: Callable[[str, str], list[Diagnostic]],
                   only: set[int] | None = None) -> dict[int, list[Fix]]:
    """Fixes that pass the re-check, keyed by the index of their diagnostic in ``diagnostics``
    (``only``: re-check just these indices, e.g. the diagnostics under the cursor)."""
    before = Counter(d.code for d in diagnostics)
    out: dict[int, list[Fix]] = {}
    for k, diag in enumerate(diagnostics):
        if only is not None and k not in only:
            continue
        for fix in diag.fixes:
            try:
                fixed = apply_edits(text, fix.edits)
            except ValueError:
                continue
            after = check(path, fixed)
            after_codes = Counter(d.code for d in after)
            removed = after_codes[diag.code] < before[diag.code]
            added = any(after_codes[c] > before[c] for c in after_codes)
            if removed and not added:
                out.setdefault(k, []).append(fix)
    return out
