"""``nki-agent profile KERNEL --task TASK``: verification plus latency, locally or on a remote runner.

Prints the staged result (compiled → correct → latency) as a table: the verdict and its seeds, the
largest errors, then the latency figures (p50, p99, mean, std, iterations, the NeuronCore) and how
they were obtained — "measured" on a device, "estimated" by a cost model, "not measured" (the
embedded simulator times nothing). ``--json`` prints the ``ProfileResult`` model as JSON instead.
With ``--runner URL`` the job runs on that runner (``remote.py``). Exit status: 0 correct,
1 not correct, 2 usage error, 3 runner unreachable or refusing.
"""

from __future__ import annotations

import typer
from rich.table import Table
from rich.text import Text

from ..diagnostics.model import from_problem
from ..toolchain import api
from ..toolchain.protocol import Latency, ProfileResult
from . import options, remote
from .render import console, print_diagnostics


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f} us"


def _latency_rows(lat: Latency) -> list[tuple[str, str]]:
    how = lat.kind + (f" ({lat.source})" if lat.source else "")
    rows = [("latency", how)]
    if lat.kind != "not measured":
        rows += [("p50", _us(lat.p50_us)), ("p99", _us(lat.p99_us)), ("mean", _us(lat.mean_us)),
                 ("std", _us(lat.std_us)), ("iterations", f"{lat.iterations} (+{lat.warmup} warm-up)"),
                 ("core", "-" if lat.core_id is None else str(lat.core_id))]
    return rows


def table(res: ProfileResult) -> Table:
    visible = [s for s in res.seeds if not s.hidden]
    hidden = len(res.seeds) - len(visible)
    seeds = f"{len(visible)} seed(s)" + (f" + {hidden} hidden" if hidden else "")
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    rows = [("kernel", res.kernel), ("runner", res.runner), ("backend", res.backend),
            ("sandbox", res.sandbox + (" (no OS jail on this machine)" if res.sandbox == "unsandboxed" else "")),
            ("target", res.target or "-"), ("compiled", "yes" if res.compiled else "no"),
            ("correct", ("yes" if res.correct else "NO") + f" on {seeds}" if res.compiled else "-")]
    if res.compiled:
        rows += [("max abs err", f"{res.max_abs_error:.3g}"), ("max rel err", f"{res.max_rel_error:.3g}"),
                 ("mismatches", str(res.mismatches))]
    rows += _latency_rows(res.latency)
    if res.speedup is not None:
        rows.append(("speedup", f"{res.speedup:.2f}x over {res.baseline.label if res.baseline else 'the baseline'}"))
    for k, v in rows:
        t.add_row(k, Text(v))
    return t


def command(
    kernel: str = typer.Argument(..., help="Kernel file."),
    task: str = options.Task,
    target: str | None = options.Target,
    kernel_name: str | None = options.KernelName,
    seeds: int = typer.Option(3, "--seeds", min=1, max=16, help="Verification seeds before timing."),
    warmup: int = typer.Option(5, "--warmup", min=0, max=100, help="Untimed runs before timing (device runners)."),
    iterations: int = typer.Option(50, "--iterations", min=1, max=1000, help="Most timed runs (device runners "
                                   "stop earlier once the figures are stable)."),
    json_out: bool = options.Json,
    runner_url: str | None = remote.RunnerUrl,
    token_file: str | None = remote.TokenFile,
    timeout: float = options.Timeout,
) -> None:
    """Verify a kernel and report its latency (measured on a Trainium runner, else not measured)."""
    target = options.validate_target(target)
    with remote.use_runner(runner_url, token_file):
        res = api.profile(kernel, task, seeds=seeds, target=target, kernel_name=kernel_name, timeout=timeout,
                          warmup=warmup, iterations=iterations)
    if json_out:
        typer.echo(res.model_dump_json(indent=2))
    else:
        console.print(table(res))
        for s in res.seeds:
            if not s.correct and s.message:
                console.print(f"  {'hidden seed' if s.hidden else f'seed {s.seed}'}: {s.message}", markup=False)
        print_diagnostics([from_problem(p, "nki-sim", kernel) for p in res.problem_list()])
    raise typer.Exit(0 if res.correct else 1)
