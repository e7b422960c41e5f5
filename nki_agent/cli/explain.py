"""``nki-agent explain CODE``: what an error id means, how to fix it, and where it is documented."""

from __future__ import annotations

import typer

from ..diagnostics import catalog
from .render import console, err_console, print_json


def command(
    code: str = typer.Argument(..., help="An error id: err_*, sim_*, NCC_*, TEN404-style, F134, NRT_*, ..."),
    json_out: bool = typer.Option(False, "--json", help="Print the entry as JSON."),
) -> None:
    """Explain an NKI / neuronx-cc error id."""
    entry = catalog.lookup(code)
    if entry is None:
        close = sorted(c for c in catalog.entries() if code.strip("[]").lower() in c.lower())[:8]
        if json_out:
            print_json({"code": code, "found": False, "suggestions": close})
        else:
            err_console.print(f"unknown error id: {code}", markup=False)
            if close:
                err_console.print("did you mean: " + ", ".join(close), markup=False)
        raise typer.Exit(2)
    if json_out:
        print_json(dict(entry.as_dict(), found=True))
        raise typer.Exit(0)
    console.print(f"{entry.code}: {entry.title}", markup=False, style="bold")
    console.print(f"category: {entry.category}" + ("  (internal compiler error: not your bug)"
                                                    if entry.not_your_bug else ""), markup=False)
    console.print(f"\n{entry.explanation}\n\nFix: {entry.fix}", markup=False)
    if entry.not_your_bug:
        console.print(f"\nNot your bug: {catalog.REPRO_HINT}", markup=False)
    console.print(f"\nDocs: {entry.doc_url}", markup=False)
    raise typer.Exit(0)
