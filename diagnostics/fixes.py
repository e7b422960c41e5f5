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


FIX_ALL_ROUNDS = 10  # a fix can unblock another (a hoist, then a split); each round re-checks the whole file


def _spans(text: str, fix: Fix) -> list[tuple[int, int]]:
    lines = text.split("\n")
    return [(_offset(lines, e.line, e.column), _offset(lines, e.end_line, e.end_column)) for e in fix.edits]


def _no_worse(before: Counter[str], after: list[Diagnostic]) -> bool:
    counts = Counter(d.code for d in after)
    return sum(counts.values()) < sum(before.values()) and all(counts[c] <= before[c] for c in counts)


def fix_all(path: str, text: str, check: Callable[[str, str], list[Diagnostic]]) -> tuple[str, list[Fix]]:
    """Every verified fix of ``text`` applied (``source.fixAll``, ``check --fix``): each round takes the first
    verified fix of every diagnostic, drops those overlapping one already taken, applies them together and
    keeps the result if the whole file re-checks with fewer findings and no code more often (else only the
    first fix); rounds repeat while fixes remain. ``check`` is what the user sees (suppressions applied).
    Returns the new text and the fixes applied, in order."""
    applied: list[Fix] = []
    for _ in range(FIX_ALL_ROUNDS):
        diags = check(path, text)
        offered = verified_fixes(path, text, diags, check)
        if not offered:
            break
        chosen: list[Fix] = []
        taken: list[tuple[int, int]] = []
        for k in sorted(offered):
            fix = offered[k][0]
            if fix.edits in {f.edits for f in chosen}:
                continue
            spans = _spans(text, fix)
            if any(s < e2 and s2 < e or s == s2 for s, e in spans for s2, e2 in taken):
                continue
            chosen.append(fix)
            taken.extend(spans)
        combined = apply_edits(text, tuple(e for f in chosen for e in f.edits))
        if len(chosen) > 1 and not _no_worse(Counter(d.code for d in diags), check(path, combined)):
            chosen = chosen[:1]
            combined = apply_edits(text, chosen[0].edits)
        text = combined
        applied.extend(chosen)
    return text, applied
