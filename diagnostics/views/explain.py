"""Explanations of error codes, as Markdown (hover on a code or under a squiggle, the "Explain error" command).

Uses the diagnostics catalog when it is there (``diagnostics.catalog.lookup``: title, explanation,
fix, doc link), else the toolchain's short titles. Imported lazily: the catalog is optional.
"""

from __future__ import annotations

import re

from ...toolchain.facts import errors

CODE_RE = re.compile(r"\b(?:err_[a-z0-9_]+|sim_[a-z0-9_]+|NCC_[A-Z]{4}\d{3}|NKI\d{3})\b")


def explain(code: str) -> str:
    """Markdown explanation of ``code``."""
    try:
        from .. import catalog

        entry = catalog.lookup(code)
    except Exception:  # noqa: BLE001 - catalog missing or broken: fall back to the toolchain titles
        entry = None
    if entry is not None:
        parts = [f"**{entry.code}** — {entry.title}", "", entry.explanation]
        if entry.fix:
            parts += ["", f"**Fix:** {entry.fix}"]
        parts += ["", f"[Documentation]({entry.doc_url})"]
        return "\n".join(parts)
    return f"**{code}** — {errors.title(code)}\n\n[Documentation]({errors.doc_url(code)})"


def code_at(line: str, index: int) -> str | None:
    """The error code written in ``line`` that covers code-point ``index``, if any."""
    for m in CODE_RE.finditer(line):
        if m.start() <= index <= m.end():
            return m.group(0)
    return None
