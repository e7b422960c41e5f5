"""``nki-agent export-sft``: turn accepted agent trajectories into a fine-tuning dataset (JSONL)."""

from __future__ import annotations

import os
from typing import Optional

import typer

from ..agent.sft import export
from ..agent.trajectory import default_dir
from .render import console


def command(
    out: str = typer.Option("sft.jsonl", "--out", "-o", help="Dataset file to write."),
    directory: Optional[str] = typer.Option(None, "--dir", help=f"Trajectory folder (default: {default_dir()})."),
    trust_local: bool = typer.Option(False, "--trust-local", help="Also export runs verified without the OS "
                                     "sandbox that were accepted with --trust-local."),
) -> None:
    """Export verified runs whose edit the user accepted, as chat examples with tool calls."""
    folder = directory or default_dir()
    if not os.path.isdir(folder):
        console.print(f"[red]no trajectory folder {folder}[/red]")
        raise typer.Exit(2)
    counts = export(folder, out, trust_local)
    console.print(f"{out}: {counts['exported']} example(s); skipped {counts['skipped']} run(s) not verified (in "
                  f"the sandbox) or not accepted, {counts['unreadable']} unreadable", markup=False)
