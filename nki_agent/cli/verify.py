"""``nki-agent verify KERNEL --task TASK``: multi-seed correctness against the task reference."""

from __future__ import annotations

from typing import Optional

import typer

from ..diagnostics.model import from_problem
from ..toolchain import api
from nki_agent.toolchain.protocol.jobs import VerifyResult
from . import options, remote
from .render import console, print_diagnostics, print_json


def summary_line(res: VerifyResult) -> str:
    if not res.compiled:
        return "did not run"
    verdict = "correct" if res.correct else "INCORRECT"
    if res.sandbox == "unsandboxed":
        verdict += " (UNSANDBOXED: no OS jail on this machine)"
    return (f"{verdict} on {len(res.seeds)} seed(s), target {res.target}: max abs err "
            f"{res.max_abs_error:.3g}, max rel err {res.max_rel_error:.3g}, "
            f"{res.mismatches} mismatching element(s)")


def command(
    kernel: str = typer.Argument(..., help="Kernel file."),
    task: str = options.Task,
    seeds: int = typer.Option(3, "--seeds", min=1, max=100, help="Number of seeds (inputs drawn per seed)."),
    target: Optional[str] = options.Target,
    kernel_name: Optional[str] = options.KernelName,
    json_out: bool = options.Json,
    timeout: float = options.Timeout,
    in_process: bool = options.InProcess,
    runner_url: Optional[str] = remote.RunnerUrl,
    token_file: Optional[str] = remote.TokenFile,
) -> None:
    """Verify a kernel against its task's reference on several seeds."""
    target = options.validate_target(target)
    if runner_url and in_process:
        raise typer.BadParameter("--in-process runs here; it cannot be combined with --runner", param_hint="--runner")
    with remote.use_runner(runner_url, token_file, roots=remote.scope(kernel, task)):
        res = api.verify(kernel, task, seeds, target, kernel_name, isolate=not in_process, timeout=timeout)
    diags = [from_problem(p, "nki-sim", kernel) for p in res.problem_list()]
    if json_out:
        out = res.model_dump(mode="json", exclude={"problems", "trace"})
        out["diagnostics"] = [d.as_dict() for d in diags]
        print_json(out)
    else:
        console.print(f"{kernel}: {summary_line(res)}", markup=False)
        for s in res.seeds:
            if not s.correct and s.message:
                console.print(f"  seed {'(hidden)' if s.seed is None else s.seed}: {s.message}", markup=False)
        print_diagnostics(diags)
    raise typer.Exit(0 if res.correct else 1)
