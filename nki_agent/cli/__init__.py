"""Command line interface ``nki-agent`` (typer)."""

from __future__ import annotations


def main() -> None:
    from .app import run

    run()
