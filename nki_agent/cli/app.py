"""The ``nki-agent`` typer application: registers one command per module of this package."""

from __future__ import annotations

import typer

from . import (
    calibrate,
    check,
    check_log,
    demo,
    explain,
    export_sft,
    fix,
    lsp,
    profile,
    runner,
    simulate,
    verify,
    watch,
)

app = typer.Typer(
    name="nki-agent",
    help="NKI Agent: check, simulate, verify and repair AWS Neuron (NKI) kernels without Trainium.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("check")(check.command)
app.command("simulate")(simulate.command)
app.command("verify")(verify.command)
app.command("profile")(profile.command)
app.command("calibrate")(calibrate.command)
app.command("watch")(watch.command)
app.command("demo")(demo.command)
app.command("explain")(explain.command)
app.command("check-log")(check_log.command)
app.command("lsp")(lsp.command)
app.command("fix")(fix.command)
app.command("export-sft")(export_sft.command)
app.add_typer(runner.app, name="runner")


def run() -> None:
    app()
