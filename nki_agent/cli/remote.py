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

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer

from ..runner.token_file import TokenFileError, read_token_file
from ..toolchain.task_discovery import TaskRef, discover, outside_task
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


def scope(*named: str | None) -> list[str]:
    """What a command may send to a runner: the current folder and the folders of the files the user named on
    the command line (a task found by discovery, or a module imported from elsewhere, is not named)."""
    return [os.getcwd(), *(os.path.dirname(os.path.abspath(p)) for p in named if p)]


def discover_task(kernel: str, text: str, runner_url: str | None) -> TaskRef | None:
    """The task of ``kernel`` as the editor discovers it (relative to the current folder). With a runner, a task
    a comment names outside ``scope(kernel)`` is an error: it would be sent without the user having named it."""
    if not runner_url:
        return discover(os.path.abspath(kernel), text, {}, os.getcwd())
    roots = scope(kernel)
    away = outside_task(os.path.abspath(kernel), text, {}, os.getcwd(), roots)
    if away is not None:
        raise typer.BadParameter(f"the task {away.written} ({away.how}) of {kernel} is {away.real}, outside "
                                 f"{' and '.join(dict.fromkeys(roots))}: it is sent to a runner only when you name it "
                                 "with --task", param_hint="--runner")
    return discover(os.path.abspath(kernel), text, {}, os.getcwd(), roots)


@contextmanager
def use_runner(url: str | None, token_file: str | None = None, timeout: float = 30.0,
               roots: Sequence[str] | None = None) -> Iterator[RemoteRunner | None]:
    """Inside the block, every toolchain job runs on the runner at ``url`` (None: locally, nothing changes);
    the previous runner is restored after it. A ``RunnerError`` raised inside the block is printed and
    ends the command with exit status ``RUNNER_FAILED``. A module the kernel or task imports is sent only from
    inside ``roots`` (default: the current folder; see ``scope``); one outside is withheld."""
    if not url:
        yield None
        return
    from ..runner.client import RemoteRunner, RunnerError
    from nki_agent.toolchain.isolation import runner

    remote = RemoteRunner(validate_url(url), token=read_token(token_file), timeout=timeout,  # token None: the env's
                          roots=list(roots) if roots is not None else scope())
    previous = runner.use(remote)
    try:
        yield remote
    except RunnerError as e:
        err_console.print(f"error: {e}", markup=False)
        raise typer.Exit(RUNNER_FAILED) from None
    finally:
        runner.use(previous)
        remote.close()
