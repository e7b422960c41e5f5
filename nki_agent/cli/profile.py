"""``nki-agent profile KERNEL --task TASK``: verification plus latency, locally or on a remote runner.

Prints the staged result (compiled → correct → latency) as a table: the verdict and its seeds, the
largest errors, then the latency figures (p50, p99, mean, std, iterations, the NeuronCore) and how
they were obtained — "measured" on a device, "estimated" by the cost model, "not measured". Below it,
the cost model's estimate (``cost_view.py``: per-engine busy time, FLOP and bandwidth utilisation,
the most expensive lines and loops, notes), always labelled estimated and apart from a measurement.
``--json`` prints the ``ProfileResult`` model as JSON instead, plus ``estimated_latency_us`` at the
top level (null without an estimate). ``--timeline F.svg`` writes the estimate's engine timeline
(``timeline_svg.py``) from one more trace-only launch in this machine's jail (``api.estimate``).

With ``--runner URL`` the job runs on that runner (``remote.py``); when the runner reports no
estimate, the estimate is made here, in the local jail. A *measured* latency from the runner is
recorded in ``measurements.jsonl`` of the config folder (``measurements.py``), with the estimate, for
``nki-agent calibrate``. Exit status: 0 correct, 1 not correct, 2 usage error, 3 runner unreachable
or refusing.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from ..diagnostics.model import from_problem
from ..toolchain import api
from nki_agent.toolchain.protocol.jobs import Latency, ProfileResult
from nki_agent.toolchain.protocol.cost import CostEstimate
from nki_agent.toolchain.judging.results import estimate_latency
from . import cost_view, measurements, options, remote, timeline_svg
from .render import console, err_console, print_diagnostics, print_json


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f} us"


def _latency_rows(lat: Latency) -> list[tuple[str, str]]:
    how = lat.kind + (f" ({lat.source})" if lat.source else "")
    if lat.kind == "estimated":  # a model's figure: never shown with a measurement's p50/p99/iterations
        est = "-" if lat.p50_us is None else f"≈ {cost_view.us(lat.p50_us)} "
        return [("latency", f"{est}{how}, not measured")]
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
    timeline: str | None = typer.Option(None, "--timeline", metavar="PATH.svg",
                                        help="Write the cost model's estimated engine timeline to this SVG file."),
    runner_url: str | None = remote.RunnerUrl,
    token_file: str | None = remote.TokenFile,
    timeout: float = options.Timeout,
) -> None:
    """Verify a kernel and report its latency: measured on a Trainium runner, estimated by the cost model."""
    target = options.validate_target(target)
    svg = _timeline_path(timeline)
    with remote.use_runner(runner_url, token_file, roots=remote.scope(kernel, task)):
        res = api.profile(kernel, task, seeds=seeds, target=target, kernel_name=kernel_name, timeout=timeout,
                          warmup=warmup, iterations=iterations)
    traced = None
    if res.compiled and (svg is not None or (runner_url and res.estimate is None)):
        traced = api.estimate(kernel, task, target=target or res.target or None, kernel_name=kernel_name,
                              timeline=svg is not None, timeout=timeout).estimate
        _adopt(res, traced)
    if runner_url:
        _record(res, kernel, task, kernel_name, target)
    if json_out:
        out = json.loads(res.model_dump_json())
        out["estimated_latency_us"] = res.estimate.latency_us if res.estimate is not None else None
        print_json(out)
    else:
        console.print(table(res))
        for s in res.seeds:
            if not s.correct and s.message:
                console.print(f"  {'hidden seed' if s.hidden else f'seed {s.seed}'}: {s.message}", markup=False)
        if res.estimate is not None:
            console.print(cost_view.render(res.estimate))
        print_diagnostics([from_problem(p, "nki-sim", kernel) for p in res.problem_list()])
    if svg is not None:
        _write_timeline(svg, traced, kernel, res.compiled)
    raise typer.Exit(0 if res.correct else 1)


def _timeline_path(value: str | None) -> Path | None:
    """``--timeline``'s file, checked before anything runs (its folder must exist)."""
    if value is None:
        return None
    p = Path(value).expanduser()
    if not value.strip() or p.is_dir() or not p.parent.is_dir():
        raise typer.BadParameter(f"{value!r} is not a file in an existing folder", param_hint="--timeline")
    return p


def _adopt(res: ProfileResult, est: CostEstimate | None) -> None:
    """A result without an estimate takes the locally traced one (without its timeline); a latency that
    was "not measured" becomes the estimate, labelled estimated (as ``results.profile_result`` does)."""
    if res.estimate is not None or est is None:
        return
    res.estimate = est.model_copy(update={"timeline": []})
    if res.latency.kind == "not measured":
        res.latency = estimate_latency(res)
        if res.correct:
            res.stage = "latency"


def _record(res: ProfileResult, kernel: str, task: str, kernel_name: str | None, target: str | None) -> None:
    """A runner's measured latency (p50), with the estimate, appended to the measurements for calibrate."""
    lat = res.latency
    if lat.kind != "measured" or lat.p50_us is None or not lat.p50_us > 0:
        return
    m = measurements.Measurement(
        kernel=str(Path(kernel).resolve()), task=str(Path(task).resolve()),
        target=lat.target or res.target or target or "", measured_us=float(lat.p50_us),
        estimated_us=res.estimate.latency_us if res.estimate is not None else None, kernel_name=kernel_name,
        kernel_sha256=measurements.file_sha256(kernel))
    try:
        measurements.record(m)
    except OSError as e:
        err_console.print(f"warning: could not record the measurement: {e}", markup=False)


def _write_timeline(svg: Path, est: CostEstimate | None, kernel: str, compiled: bool) -> None:
    if est is None:
        why = "the cost model made no estimate" if compiled else "the kernel did not compile"
        err_console.print(f"timeline not written: {why}", markup=False)
        return
    try:
        timeline_svg.write(est, svg, subtitle=kernel)
    except OSError as e:
        err_console.print(f"error: cannot write {svg}: {e.strerror or e}", markup=False)
        raise typer.Exit(2) from None
    err_console.print(f"estimated timeline written to {svg}", markup=False)
