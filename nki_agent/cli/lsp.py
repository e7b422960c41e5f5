"""``nki-agent lsp [--tcp HOST:PORT]``: run the NKI language server (stdio by default)."""

from __future__ import annotations

import os
import sys

import typer


def command(
    tcp: str | None = typer.Option(None, "--tcp", help="serve over TCP on HOST:PORT instead of stdio (debugging)"),
    stdio: bool = typer.Option(True, "--stdio/--no-stdio", help="serve over stdin/stdout (the default)"),
    log_level: str = typer.Option("WARNING", "--log-level", help="server log level (logs go to stderr)"),
) -> None:
    """Run the language server (what editors start: `nki-agent lsp`)."""
    from ..server.__main__ import main

    argv = ["--log-level", log_level] + (["--tcp", tcp] if tcp else [])
    code = main(argv)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (ValueError, OSError):
            pass
    os._exit(code)  # a running simulation thread must not keep an exited server alive
