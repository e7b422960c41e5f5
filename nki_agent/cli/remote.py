"""Running a command's jobs on a remote runner: the shared ``--runner URL`` / ``--token-file F`` options and
``use_runner``, which installs a ``RemoteRunner`` in the toolchain's ``Runner`` seam for one command.

A command wires it in with its two options and one ``with``::

    runner_url: Optional[str] = remote.RunnerUrl, token_file: Optional[str] = remote.TokenFile,
    ...
    with remote.use_runner(runner_url, token_file):
        res = api.verify(...)

Without ``--runner`` the block runs locally, unchanged. A runner that cannot be reached or refuses
the client ends the command with one message on stderr and exit status 3 (1 stays "incorrect", 2
"usage error"). The token comes from ``--token-file`` (its first line), else env
``NKI_AGENT_RUNNER_TOKEN``; it is never printed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer

from ..runner.token_file import TokenFileError, read_token_file
from .render import err_console

if TYPE_CHECKING:
    from ..runner.client import RemoteRunner

RUNNER_FAILED = 3  # exit status: the runner could not be reached, refused the client, or stayed busy

RunnerUrl = typer.Option(None, "--runner", metavar="URL",
                         help="Run on the remote runner at URL (nki-agent runner serve) instead of this machine.")
TokenFile = typer.Option(None, "--token-file", metavar="FILE",
                         help="File whose first line is the runner's bearer token "
                              "(default: env NKI_AGENT_RUNNER_TOKEN).")


def read_token(path: str | None) -> str | None:
    """The token in ``path`` (first non-empty line), or None without a file."""
    if not path:
        return None
    try:
        return read_token_file(path)
    except TokenFileError as e:
        raise typer.BadParameter(str(e), param_hint="--token-file") from None


def validate_url(url: str) -> str:
    if not url.startswith(("http://", "https://")) or len(url) < 10:
        raise typer.BadParameter("a runner URL looks like http://HOST:PORT", param_hint="--runner")
    return url


@contextmanager
def use_runner(url: str | None, token_file: str | None = None, timeout: float = 30.0) -> Iterator[RemoteRunner | None]:
    """Inside the block, every toolchain job runs on the runner at ``url`` (None: locally, nothing changes);
    the previous runner is restored after it. A ``RunnerError`` raised inside the block is printed and
    ends the command with exit status ``RUNNER_FAILED``."""
    if not url:
        yield None
        return
    from ..runner.client import RemoteRunner, RunnerError
    from ..toolchain import runner

    remote = RemoteRunner(validate_url(url), token=read_token(token_file), timeout=timeout)  # None: the env's
    previous = runner.use(remote)
    try:
        yield remote
    except RunnerError as e:
        err_console.print(f"error: {e}", markup=False)
        raise typer.Exit(RUNNER_FAILED) from None
    finally:
        runner.use(previous)
        remote.close()
