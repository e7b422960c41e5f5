"""``python -m nki_agent`` = the ``nki-agent`` command."""

from .cli import main

main()
