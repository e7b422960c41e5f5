"""Command line interface ``nki-agent`` (typer)."""

from __future__ import annotations

import os
import sys

# commands that verify or simulate once and exit: a warm executor (toolchain/isolation/standby.py) started for a
# next verification would only be stopped again at exit; the others (watch, demo, fix, lsp, runner) run many
ONE_SHOT = frozenset({"check", "simulate", "verify", "profile", "calibrate", "explain", "check-log", "export-sft"})


def main() -> None:
    from .app import run

    command = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
    if command in ONE_SHOT:
        os.environ.setdefault("NKI_AGENT_WARM_WORKERS", "0")
    run()
