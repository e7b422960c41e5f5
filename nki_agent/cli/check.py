"""``nki-agent check FILE...``: what can be found without running the kernel."""

from __future__ import annotations

from typing import List

import typer

from ..diagnostics.model import from_problem
from ..toolchain.check import check_file
from .render import print_diagnostics, print_json, console


def command(
    files: List[str] = typer.Argument(..., help="Kernel files to check."),
    json_out: bool = typer.Option(False, "--json", help="Print diagnostics as JSON."),
) -> None:
    """Check kernel files without running them (syntax, kernels found, API generation)."""
    results = [check_file(f) for f in files]
    diags = [from_problem(p, "nki-check", r.path) for r in results for p in r.problems]
    if json_out:
        print_json({"files": [{"path": r.path, "generation": r.generation,
                               "kernels": [k.__dict__ for k in r.kernels]} for r in results],
                    "diagnostics": [d.as_dict() for d in diags]})
    else:
        for r in results:
            names = ", ".join(k.name for k in r.kernels) or "no kernels"
            console.print(f"{r.path}: {r.generation or 'no NKI imports'}; {names}", markup=False)
        print_diagnostics(diags)
    raise typer.Exit(1 if any(d.severity == "error" for d in diags) else 0)
