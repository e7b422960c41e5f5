"""Explanations of error codes (hover on a code or under a squiggle, the "Explain error" command).

Uses the diagnostics catalog when it is there (``diagnostics.catalog.lookup``: title, explanation,
fix, doc link), else the toolchain's short titles. Imported lazily: the catalog is optional.

The command's Markdown is shown as a document, never squeezed into a ``showMessage`` balloon: it is
written to ``explain_file`` — ``<cache>/nki-agent/explain/<code>.md`` in the user's cache folder
(``$XDG_CACHE_HOME``, else ``~/.cache``), never the project — which the client opens with
``window/showDocument``. An untitled or virtual document is not portable across clients; a file is.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from nki_agent.toolchain.facts import errors

CODE_RE = re.compile(r"\b(?:err_[a-z0-9_]+|sim_[a-z0-9_]+|NCC_[A-Z]{4}\d{3}|NKI\d{3})\b")
FILE_SAFE = re.compile(r"[A-Za-z0-9_]{1,100}")  # an error code as a file name: nothing that walks out of the folder


def explain(code: str) -> str:
    """Markdown explanation of ``code``."""
    try:
        from ..diagnostics import catalog

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


def cache_dir() -> Path:
    """The user's cache folder for generated documents (``$XDG_CACHE_HOME/nki-agent``, else ``~/.cache``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nki-agent"


def explain_file(code: str, markdown: str) -> Path:
    """``markdown`` written (atomically) as ``<cache>/explain/<code>.md``; its path. ``code`` must be an
    identifier (``ValueError`` otherwise); ``OSError`` when the folder cannot be written."""
    if not FILE_SAFE.fullmatch(code):
        raise ValueError(f"not an error code: {code[:40]!r}")
    folder = cache_dir() / "explain"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{code}.md"
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{code}.", suffix=".md")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(markdown + "\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
