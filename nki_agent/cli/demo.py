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
from nki_agent.toolchain.protocol.jobs import VerifyResult
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
    runs: list[tuple[VerifyResult, dict[str, Any]]] = []  # each verification and what the table adds to it
    for kernel, task in pairs:
        chk = check_file(kernel)
        t0 = time.perf_counter()
        res = api.verify(kernel, task, seeds, target, isolate=not in_process)
        runs.append((res, {"example": os.path.basename(os.path.dirname(kernel)), "api": chk.generation,
                           "kernels": [k.name for k in chk.kernels], "wall_seconds": time.perf_counter() - t0}))
    ok = sum(1 for res, _ in runs if res.correct)
    if json_out:  # each row: the verification's own JSON (without the bulky trace) plus the table's columns
        rows = [dict(res.model_dump(mode="json", exclude={"trace"}), **meta) for res, meta in runs]
        print_json({"examples": rows, "correct": ok, "total": len(rows)})
    else:
        table = Table(title="NKI Agent demo: embedded toolchain over examples/")
        for col in ("example", "kernel", "API", "target", "result", "max abs err", "time"):
            table.add_column(col)
        for res, meta in runs:
            verdict = "[green]correct[/]" if res.correct else ("[red]incorrect[/]" if res.compiled else "[red]error[/]")
            table.add_row(meta["example"], os.path.basename(res.kernel), meta["api"], res.target, verdict,
                          f"{res.max_abs_error:.2e}", f"{meta['wall_seconds']:.2f}s")
        console.print(table)
        for res, _ in runs:
            for p in res.problems:
                where = f"{p.location.path}:{p.location.line}" if p.location else f"{res.kernel}:1"
                console.print(f"  {where}: [{p.code}] {p.message}", markup=False)
        console.print(f"{ok}/{len(runs)} example kernels verified correct", markup=False)
    raise typer.Exit(0 if ok == len(runs) else 1)
