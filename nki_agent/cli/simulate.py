"""``nki-agent simulate KERNEL [--task TASK]``: run the kernel once on the task's inputs.

Without ``--task`` the task is discovered as the editor does (a ``# nki-task:`` comment, the kernel file
itself when it defines ``get_inputs``, a sibling ``task.py``); with none, the kernel file is run without a
task in the same order as the editor's save (``toolchain/taskless/``): its ``__main__`` driver, a pytest
test under the current folder that calls its kernel, the inputs of its shape lines
(``# nki: a=(256, 512) float32, b=(256, 512) float32``). The output says what ran, and whose word its
verdict is ("verdict: its checks pass — self-reported by the file": the file's own code ran in the worker
that reported it; ``self_reported`` in ``--json``).
"""

from __future__ import annotations

import os

import typer

from ..diagnostics.model import Diagnostic, from_problem
from ..toolchain import api, taskless
from nki_agent.toolchain.protocol.jobs import SimulateResult
from ..toolchain.task_discovery import SELF
from . import options, remote
from .render import console, print_diagnostics, print_json

NO_INPUTS = ("no task and no inputs: add a shape line above the kernel (`# nki: a=(128, 512) float32, ...`), "
             "a `if __name__ == \"__main__\":` driver, or a task (--task / `# nki-task: PATH`)")


def command(
    kernel: str = typer.Argument(..., help="Kernel file."),
    task: str | None = typer.Option(None, "--task", "-t", help="Task module: get_inputs() and reference()/Model "
                                       "(default: discovered; with none, the file's __main__ driver, a pytest test "
                                       "that calls the kernel, or its shape lines)."),
    target: str | None = options.Target,
    kernel_name: str | None = options.KernelName,
    seed: int = typer.Option(0, "--seed", help="Seed for the task's inputs."),
    json_out: bool = options.Json,
    timeout: float = options.Timeout,
    in_process: bool = options.InProcess,
    runner_url: str | None = remote.RunnerUrl,
    token_file: str | None = remote.TokenFile,
) -> None:
    """Simulate a kernel on the embedded toolchain (no reference check; without a task, its own driver's)."""
    target = options.validate_target(target)
    if runner_url and in_process:
        raise typer.BadParameter("--in-process runs here; it cannot be combined with --runner", param_hint="--runner")
    text: str | None = None
    if task is None:
        text = _read(kernel)
        ref = remote.discover_task(kernel, text, runner_url) if text is not None else None
        if ref is not None:
            task = kernel if ref.path == SELF else ref.path
        elif runner_url:
            raise typer.BadParameter("a kernel without a task runs on this machine only; give --task for the runner",
                                     param_hint="--runner")
    if task is None:
        res = api.simulate_taskless(kernel, root=os.getcwd(), target=target, isolate=not in_process, timeout=timeout)
    else:
        with remote.use_runner(runner_url, token_file, roots=remote.scope(kernel)):
            res = api.simulate(kernel, task, target, kernel_name, seed, isolate=not in_process, timeout=timeout)
    diags = [from_problem(p, "nki-sim", kernel) for p in res.problem_list()]
    what = {"task": f"on the inputs of {task}", "main": "via __main__", "test": f"via {res.via_test}",
            "shapes": "from the shape line"}.get(res.via, "")
    if json_out:
        out = res.model_dump(mode="json", exclude={"problems"})
        out["diagnostics"] = [d.as_dict() for d in diags]
        print_json(out)
    else:
        if res.via == "none":
            console.print(f"{kernel}: {NO_INPUTS}", markup=False)
        elif res.ran:
            console.print(f"simulated {kernel} {what} on {res.target} ({res.generation} API) in "
                          f"{res.seconds:.3f} s; peak SBUF {res.peak_sbuf_bytes // 128} B/partition, "
                          f"peak PSUM {res.peak_psum_bytes // 128} B/partition"
                          + (" (UNSANDBOXED: no OS jail on this machine)" if res.sandbox == "unsandboxed" else ""),
                          markup=False)
            for launch in res.launches:
                shapes = ", ".join(f"{i.dtype}{i.shape}" if i.shape is not None else i.dtype for i in launch.inputs)
                console.print(f"  launched {launch.kernel_name}({shapes})" + (f" grid {launch.grid}" if launch.grid else ""),
                              markup=False)
            for i, o in enumerate(res.outputs):
                console.print(f"  output {i}: {o.dtype}{o.shape} min={o.min} max={o.max} NaN={o.nan}", markup=False)
            _say_whose(res, diags, text)
        elif res.via != "task":
            console.print(f"ran {kernel} {what}: " + ("; ".join(res.tried) or "no kernel of the file ran"), markup=False)
        print_diagnostics(diags)
    raise typer.Exit(0 if res.ran and not any(d.severity == "error" for d in diags) else 1)


def _say_whose(res: SimulateResult, diags: list[Diagnostic], text: str | None) -> None:
    """A task-less run's verdict and whose word it is: "its checks pass — self-reported by the file" (its
    ``__main__`` driver, the test importing it or its shape lines' module ran in the worker that said so)."""
    if res.via not in ("main", "test", "shapes"):
        return
    if any(d.severity == "error" for d in diags):
        if res.self_reported:
            console.print(f"  verdict: failed ({taskless.SELF_REPORTED})", markup=False)
        return
    checks = taskless.main_checks(taskless.parse(text)) if text is not None else True
    console.print(f"  verdict: {taskless.claim(res, main_checks=checks)}", markup=False)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None
