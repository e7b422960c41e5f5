"""Rendering of diagnostics and results for the terminal (rich) and for machines (JSON)."""

from __future__ import annotations

import json
import sys
from typing import Any, Iterable

from rich.console import Console
from rich.markup import escape

from ..diagnostics.model import Diagnostic

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan", "hint": "dim"}


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def diagnostic_text(d: Diagnostic) -> str:
    return f"{d.path}:{d.line}:{d.column}: {d.severity}[{d.code}] {d.message}"


def print_diagnostics(diags: Iterable[Diagnostic]) -> None:
    for d in diags:
        style = _STYLE.get(d.severity, "")
        head = escape(f"{d.path}:{d.line}:{d.column}: {d.severity}[{d.code}]")
        console.print(f"[{style}]{head}[/] {escape(d.message)}", markup=True, highlight=False)
        for r in d.related:
            console.print(f"    {r.path}:{r.line}:{r.column}: note: {r.message}", markup=False)
        console.print(f"    see {d.doc_url}  (source: {d.source})", markup=False, style="dim")
