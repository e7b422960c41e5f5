"""``nki-agent demo``: check, simulate and verify every example kernel and print a readable report."""

from __future__ import annotations

import glob
import os
import time
from typing import Any, Optional

import typer
from rich.table import Table

from ..toolchain import api
from ..toolchain.check import check_file
from . import options
from .render import console, print_json


def discover(root: str) -> list[tuple[str, str]]:
    """(kernel, task) pairs: every ``kernel_*.py`` next to a ``task.py`` under ``root``."""
    pairs = []
    for task in sorted(glob.glob(os.path.join(root, "*", "task.py"))):
        for kernel in sorted(glob.glob(os.path.join(os.path.dirname(task), "kernel_*.py"))):
            pairs.append((kernel, task))
    return pairs


def command(
    examples: str = typer.Option("examples", "--examples", help="Folder of example tasks."),
    target: Optional[str] = options.Target,
    seeds: int = typer.Option(3, "--seeds", min=1, max=20),
    json_out: bool = options.Json,
    in_process: bool = options.InProcess,
) -> None:
    """Run the embedded toolchain over the examples: check, simulate, verify."""
    target = options.validate_target(target)
    pairs = discover(examples)
    if not pairs:
        raise typer.BadParameter(f"no examples found under {examples!r}", param_hint="--examples")
    rows: list[dict[str, Any]] = []
    for kernel, task in pairs:
        chk = check_file(kernel)
        t0 = time.perf_counter()
        res = api.verify(kernel, task, seeds, target, isolate=not in_process)
        rows.append({"example": os.path.basename(os.path.dirname(kernel)), "kernel": os.path.basename(kernel),
                     "api": chk.generation, "kernels": [k.name for k in chk.kernels], "target": res.get("target"),
                     "compiled": res.get("compiled"), "correct": res.get("correct"),
                     "max_abs_error": res.get("max_abs_error", 0.0), "seconds": time.perf_counter() - t0,
                     "problems": res.get("problems", [])})
    ok = sum(1 for r in rows if r["correct"])
    if json_out:
        print_json({"examples": rows, "correct": ok, "total": len(rows)})
    else:
        table = Table(title="NKI Agent demo: embedded toolchain over examples/")
        for col in ("example", "kernel", "API", "target", "result", "max abs err", "time"):
            table.add_column(col)
        for r in rows:
            verdict = "[green]correct[/]" if r["correct"] else ("[red]incorrect[/]" if r["compiled"] else "[red]error[/]")
            table.add_row(r["example"], r["kernel"], r["api"], str(r["target"]), verdict,
                          f"{r['max_abs_error']:.2e}", f"{r['seconds']:.2f}s")
        console.print(table)
        for r in rows:
            for p in r["problems"]:
                loc = p.get("location") or {}
                console.print(f"  {loc.get('path', r['kernel'])}:{loc.get('line', 1)}: [{p['code']}] {p['message']}",
                              markup=False)
        console.print(f"{ok}/{len(rows)} example kernels verified correct", markup=False)
    raise typer.Exit(0 if ok == len(rows) else 1)
