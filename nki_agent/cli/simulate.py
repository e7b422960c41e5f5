"""``nki-agent simulate KERNEL --task TASK``: run the kernel once on the task's inputs."""

from __future__ import annotations

from typing import Optional

import typer

from ..diagnostics.model import from_problem
from ..toolchain import api
from . import options, remote
from .render import console, print_diagnostics, print_json


def command(
    kernel: str = typer.Argument(..., help="Kernel file."),
    task: str = options.Task,
    target: Optional[str] = options.Target,
    kernel_name: Optional[str] = options.KernelName,
    seed: int = typer.Option(0, "--seed", help="Seed for the task's inputs."),
    json_out: bool = options.Json,
    timeout: float = options.Timeout,
    in_process: bool = options.InProcess,
    runner_url: Optional[str] = remote.RunnerUrl,
    token_file: Optional[str] = remote.TokenFile,
) -> None:
    """Simulate a kernel on the embedded toolchain (no reference check)."""
    target = options.validate_target(target)
    if runner_url and in_process:
        raise typer.BadParameter("--in-process runs here; it cannot be combined with --runner", param_hint="--runner")
    with remote.use_runner(runner_url, token_file):
        res = api.simulate(kernel, task, target, kernel_name, seed, isolate=not in_process, timeout=timeout)
    diags = [from_problem(p, "nki-sim", kernel) for p in res.problem_list()]
    if json_out:
        out = res.model_dump(mode="json", exclude={"problems"})
        out["diagnostics"] = [d.as_dict() for d in diags]
        print_json(out)
    else:
        if res.ran:
            console.print(f"simulated {kernel} on {res.target} ({res.generation} API) in "
                          f"{res.seconds:.3f} s; peak SBUF {res.peak_sbuf_bytes // 128} B/partition, "
                          f"peak PSUM {res.peak_psum_bytes // 128} B/partition"
                          + (" (UNSANDBOXED: no OS jail on this machine)" if res.sandbox == "unsandboxed" else ""),
                          markup=False)
            for i, o in enumerate(res.outputs):
                console.print(f"  output {i}: {o.dtype}{o.shape} min={o.min} max={o.max} NaN={o.nan}", markup=False)
        print_diagnostics(diags)
    raise typer.Exit(0 if res.ran and not any(d.severity == "error" for d in diags) else 1)
