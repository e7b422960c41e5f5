"""Options shared by several commands (one definition, one help text)."""

from __future__ import annotations

from typing import Optional

import typer

from nki_agent.toolchain.facts.targets import TARGETS

TARGET_HELP = f"Hardware target whose limits apply: {', '.join(TARGETS)} (default: trn1 for classic kernels, trn3 for new-API kernels, as the SDK simulators)."

Task = typer.Option(..., "--task", "-t", help="Task module: get_inputs() and reference()/Model.")
Target = typer.Option(None, "--target", help=TARGET_HELP)
KernelName = typer.Option(None, "--kernel", "-k", help="Kernel function name when the file defines several.")
Json = typer.Option(False, "--json", help="Print the result as JSON.")
Timeout = typer.Option(60.0, "--timeout", help="Wall-clock limit in seconds for the whole job.")
InProcess = typer.Option(False, "--in-process", help="Run in this process instead of the sandboxed worker.")


def validate_target(target: Optional[str]) -> Optional[str]:
    if target is None:
        return None
    from nki_agent.toolchain.facts.targets import get_target

    try:
        return get_target(target).name
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--target") from None
