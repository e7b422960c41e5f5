"""The "Explain error" command's document (the Markdown itself is ``diagnostics.views.explain``).

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

from ..diagnostics.views.explain import code_at, explain

__all__ = ["cache_dir", "code_at", "explain", "explain_file"]

FILE_SAFE = re.compile(r"[A-Za-z0-9_]{1,100}")  # an error code as a file name: nothing that walks out of the folder


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
