"""``nki-agent verify KERNEL --task TASK``: multi-seed correctness against the task reference."""

from __future__ import annotations

from typing import Any, Optional

import typer

from ..diagnostics.model import from_problem
from ..toolchain import api
from . import options
from .render import console, print_diagnostics, print_json


def summary_line(res: dict[str, Any]) -> str:
    if not res.get("compiled"):
        return "did not run"
    verdict = "correct" if res.get("correct") else "INCORRECT"
    if res.get("sandbox") == "unsandboxed":
        verdict += " (UNSANDBOXED: no OS jail on this machine)"
    return (f"{verdict} on {len(res.get('seeds', []))} seed(s), target {res.get('target')}: max abs err "
            f"{res.get('max_abs_error', 0.0):.3g}, max rel err {res.get('max_rel_error', 0.0):.3g}, "
            f"{res.get('mismatches', 0)} mismatching element(s)")


def command(
    kernel: str = typer.Argument(..., help="Kernel file."),
    task: str = options.Task,
    seeds: int = typer.Option(3, "--seeds", min=1, max=100, help="Number of seeds (inputs drawn per seed)."),
    target: Optional[str] = options.Target,
    kernel_name: Optional[str] = options.KernelName,
    json_out: bool = options.Json,
    timeout: float = options.Timeout,
    in_process: bool = options.InProcess,
) -> None:
    """Verify a kernel against its task's reference on several seeds."""
    target = options.validate_target(target)
    res = api.verify(kernel, task, seeds, target, kernel_name, isolate=not in_process, timeout=timeout)
    diags = [from_problem(p, "nki-sim", kernel) for p in api.problems_of(res)]
    if json_out:
        out = {k: v for k, v in res.items() if k not in ("problems", "trace")}
        out["diagnostics"] = [d.as_dict() for d in diags]
        print_json(out)
    else:
        console.print(f"{kernel}: {summary_line(res)}", markup=False)
        for s in res.get("seeds", []):
            if not s.get("correct") and s.get("message"):
                console.print(f"  seed {s['seed']}: {s['message']}", markup=False)
        print_diagnostics(diags)
    raise typer.Exit(0 if res.get("correct") else 1)
