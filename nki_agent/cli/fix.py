"""``nki-agent fix KERNEL [--task TASK]``: the compile → verify → fix agent from the command line.

Prints progress (turn, tool, cost) as it goes and the diff of the verified kernel at the end. The
kernel file is rewritten only with ``--apply``, only when the agent verified its edit, and only if
the file still holds the text the agent started from (an editor may have saved meanwhile).
"""

from __future__ import annotations

import os
from typing import Optional

import typer

from ..agent.backends import SpecError, default_chain, make_chain
from ..agent.loop import AgentConfig, Event, run_agent
from ..agent.router import Router
from ..agent.snapshot import Snapshot, apply_if_current
from ..agent.trajectory import default_dir, mark_accepted
from ..toolchain.task_discovery import SELF
from . import options, remote
from .render import console, print_json

GENERATIONS = ("auto", "classic", "new")


def command(
    kernel: str = typer.Argument(..., help="Kernel file to repair."),
    task: Optional[str] = typer.Option(None, "--task", "-t", help="Task module (default: `# nki-task:` comment, "
                                       "the kernel file itself if it defines get_inputs, or a sibling task.py)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Backend chain, cheapest first: rules, "
                                        "anthropic[:MODEL], openai:MODEL@URL (comma-separated; default: rules, "
                                        "then anthropic when ANTHROPIC_API_KEY is set)."),
    max_turns: int = typer.Option(10, "--max-turns", min=1, max=100, help="Model turns before giving up."),
    max_dollars: float = typer.Option(5.0, "--max-dollars", min=0.0, help="Spend limit in US$ (0: none)."),
    max_seconds: float = typer.Option(900.0, "--max-seconds", min=1.0, help="Wall-time limit of the run."),
    seeds: int = typer.Option(3, "--seeds", min=1, max=100, help="Verification seeds."),
    target: Optional[str] = options.Target,
    sdk: str = typer.Option("auto", "--sdk-generation", help="API generation your Neuron SDK accepts: auto, "
                            "classic, new (new: classic kernels are migrated)."),
    apply: bool = typer.Option(False, "--apply", help="Write the verified kernel back to KERNEL."),
    trust_local: bool = typer.Option(False, "--trust-local", help="Accept a kernel verified without the OS "
                                     "sandbox (where namespaces are unavailable) for --apply and export-sft."),
    trajectory_dir: Optional[str] = typer.Option(None, "--trajectory-dir", help=f"Where to record the run "
                                                 f"(default: {default_dir()})."),
    no_trajectory: bool = typer.Option(False, "--no-trajectory", help="Do not record the run."),
    json_out: bool = options.Json,
    runner_url: Optional[str] = remote.RunnerUrl,
    token_file: Optional[str] = remote.TokenFile,
) -> None:
    """Repair a kernel until it verifies against its task (offline rules, then a model if configured)."""
    target = options.validate_target(target)
    if sdk not in GENERATIONS:
        raise typer.BadParameter(f"must be one of {', '.join(GENERATIONS)}", param_hint="--sdk-generation")
    try:
        with open(kernel, encoding="utf-8", newline="") as fh:  # keep CRLF files CRLF
            text = fh.read()
    except (OSError, UnicodeDecodeError) as e:
        console.print(f"[red]cannot read {kernel}: {e}[/red]")
        raise typer.Exit(2) from None
    self_task = False
    named_task = task
    if task is None:
        ref = remote.discover_task(kernel, text, runner_url)
        if ref is None:
            console.print(f"[red]no task for {kernel}[/red]: pass --task, add a `# nki-task: path` comment, define "
                          "get_inputs() in the kernel file, or put a task.py next to it")
            raise typer.Exit(2)
        self_task = ref.path == SELF
        task = os.path.abspath(kernel) if self_task else ref.path
    try:
        tiers = make_chain(model or default_chain())
    except SpecError as e:
        raise typer.BadParameter(str(e), param_hint="--model") from None
    cfg = AgentConfig(max_turns=max_turns, max_dollars=max_dollars, max_seconds=max_seconds, seeds=seeds,
                      target=target, sdk_generation="" if sdk == "auto" else sdk,
                      trajectory_dir=None if no_trajectory else (trajectory_dir or default_dir()))
    snap = Snapshot(os.path.abspath(kernel), None, text)

    def show(e: Event) -> None:
        if e.kind in ("turn", "result", "route") and not json_out:
            console.print(f"[dim]{e.message}[/dim]  (${e.dollars:.4f}, {e.tokens} tokens)", highlight=False)

    with remote.use_runner(runner_url, token_file, roots=remote.scope(kernel, named_task)):  # candidates are compiled and verified on the runner
        res = run_agent(snap, os.path.abspath(kernel), task, Router(tiers), cfg, self_task=self_task, on_event=show)
    applied = False
    refused = res.edit is not None and not res.trusted(trust_local)
    if refused:  # stdout stays pure JSON with --json ("refused": true); the reason goes to stderr then
        if json_out:
            typer.echo(res.refusal(), err=True)
        else:
            console.print(f"[yellow]{res.refusal()}[/yellow]")
    if apply and res.edit is not None and not refused:
        with open(kernel, encoding="utf-8", newline="") as fh:
            now = Snapshot(snap.uri, None, fh.read())
        new_text = apply_if_current(now, snap, res.edit)
        if new_text is None:
            console.print("[yellow]the file changed while the agent ran; not applied (rerun)[/yellow]")
        else:
            with open(kernel, "w", encoding="utf-8", newline="") as fh:
                fh.write(new_text)
            applied = True
    if res.trajectory and res.edit is not None:
        mark_accepted(res.trajectory, applied, "cli --apply" if apply else "cli, not applied",
                      trusted=res.trusted(trust_local))
    if json_out:
        print_json({"verdict": res.verdict, "reason": res.reason, "turns": res.turns, "tokens": res.usage.total,
                    "dollars": res.dollars, "seconds": round(res.seconds, 3), "routes": res.routes,
                    "diff": res.diff, "applied": applied, "trajectory": res.trajectory, "sandbox": res.sandbox,
                    "refused": refused})
    else:
        if res.diff:
            console.print(res.diff, markup=False, highlight=False)
        console.print(res.summary(), markup=False)
        if applied:
            console.print(f"applied to {kernel}")
        elif res.edit is not None and not refused:
            console.print("not applied (use --apply)")
    raise typer.Exit(0 if res.ok else 1)
