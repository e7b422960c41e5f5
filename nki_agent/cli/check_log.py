"""``nki-agent check-log LOG [--source KERNEL]``: saved compiler / simulator output -> the same diagnostics.

For logs from a Trainium host's CI: paths in the log that name the kernel file are remapped to
``--source``; errors without a line land on the tensor or kernel ``def`` in that file.
"""

from __future__ import annotations

import os

import typer

from ..diagnostics.parsers import parse_log
from .render import console, print_diagnostics, print_json
from .sarif import to_sarif

# Read at most this much of a log (head + tail); parse_log bounds its own work further.
MAX_LOG_BYTES = 64 * 1024 * 1024
_HEAD = 1024 * 1024
# A kernel source larger than this is not a kernel; errors then stay at the log's own locations.
MAX_SOURCE_BYTES = 5 * 1024 * 1024
FORMATS = ("text", "json", "sarif")


def _read(path: str, limit: int) -> str:
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if size <= limit:
            raw = f.read()
        else:
            head = f.read(_HEAD)
            f.seek(size - (limit - _HEAD))
            raw = head + b"\n...\n" + f.read()
    return raw.decode("utf-8", errors="replace")


def command(
    log: str = typer.Argument(..., help="Saved neuronx-cc / NKI / nki.simulate output ('-' for stdin)."),
    source: str | None = typer.Option(None, "--source", "-s", help="The kernel file the log is about."),
    fmt: str = typer.Option("text", "--format", "-f", help="Output format: text, json or sarif."),
) -> None:
    """Turn saved compiler or simulator output into diagnostics."""
    if fmt not in FORMATS:
        raise typer.BadParameter(f"must be one of {', '.join(FORMATS)}", param_hint="--format")
    try:
        if log == "-":
            import sys

            text = sys.stdin.buffer.read(MAX_LOG_BYTES).decode("utf-8", errors="replace")
        else:
            text = _read(log, MAX_LOG_BYTES)
    except OSError as e:
        raise typer.BadParameter(f"cannot read {log}: {e.strerror or e}", param_hint="LOG") from None
    source_text = None
    if source:
        try:
            if os.path.getsize(source) <= MAX_SOURCE_BYTES:
                source_text = _read(source, MAX_SOURCE_BYTES)
        except OSError as e:
            raise typer.BadParameter(f"cannot read {source}: {e.strerror or e}", param_hint="--source") from None
    diags = parse_log(text, source, source_text, log_path=None if log == "-" else log)
    if fmt == "json":
        print_json({"log": log, "source": source, "diagnostics": [d.as_dict() for d in diags]})
    elif fmt == "sarif":
        print_json(to_sarif(diags))
    else:
        if not diags:
            console.print(f"{log}: no errors", markup=False)
        print_diagnostics(diags)
    raise typer.Exit(1 if any(d.severity == "error" for d in diags) else 0)
