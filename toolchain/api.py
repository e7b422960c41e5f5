"""Façade of the toolchain for tools (CLI, server, agent): verify / simulate a kernel file against a task.

By default the work goes to the ``Runner`` seam (``runner.py``; today jailed worker processes on this
machine, ``sandbox.py``), so a hostile or broken kernel
cannot hang, crash or fool the caller: ``verify`` computes its verdict in this process from the
arrays a reference worker and a kernel worker return (``judge.py``). ``isolate=False`` runs
in-process (tests and benchmarks only). All paths return the same JSON-able dict; a problem that
stops the job appears in ``problems``; jailed results say how they ran in ``sandbox``
(``bwrap`` or ``unsandboxed``, where namespaces are unavailable; in-process: ``in-process``).

``search_path`` lists folders the kernel and task may import from after their own folder (the fix
agent verifies a temp copy and passes the user's kernel folder, so sibling helper modules import;
the copy still shadows the user's file of the same name). Those folders are read, never written.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from . import runner, sandbox
from .errors import Problem

DEFAULT_TIMEOUT = sandbox.DEFAULT_TIMEOUT


IN_PROCESS = "in-process"


def verify(kernel: str, task: str, seeds: int = 3, target: str | None = None, kernel_name: str | None = None,
           isolate: bool = True, timeout: float = DEFAULT_TIMEOUT,
           cancel: threading.Event | None = None, search_path: Sequence[str] = (),
           protect: Sequence[str] = ()) -> dict[str, Any]:
    """Verify ``kernel`` against ``task`` on ``seeds`` seeds; the verdict is computed here.

    ``protect`` names more files the kernel process may not read besides the task (e.g. the user's
    original of a kernel file that is its own task, when a candidate copy is verified)."""
    if not isolate:
        from .verify import verify_files

        return dict(verify_files(kernel, task, seeds, target, kernel_name, time_limit=timeout,
                                 search_path=search_path).as_dict(), sandbox=IN_PROCESS)
    return runner.current().verify(kernel, task, seeds, target, kernel_name, timeout, cancel, search_path, protect)


def simulate(kernel: str, task: str, target: str | None = None, kernel_name: str | None = None, seed: int = 0,
             isolate: bool = True, timeout: float = DEFAULT_TIMEOUT,
             cancel: threading.Event | None = None, search_path: Sequence[str] = ()) -> dict[str, Any]:
    if not isolate:
        from .simulate import simulate_files

        return dict(simulate_files(kernel, task, target, kernel_name, seed, time_limit=timeout,
                                   search_path=search_path), sandbox=IN_PROCESS)
    return runner.current().simulate(kernel, task, target, kernel_name, seed, timeout, cancel, search_path)


def problems_of(result: dict[str, Any]) -> list[Problem]:
    return [Problem.from_dict(p) for p in result.get("problems", [])]


def describe_task(task: str, isolate: bool = True, timeout: float = 30.0,
                  search_path: Sequence[str] = ()) -> dict[str, Any]:
    """The task's inputs (shape, dtype per argument, seed 0) and settings, for prompts and hovers."""
    if not isolate:
        from .tasks import describe_task as describe

        return describe(task, search_path)
    return runner.current().describe(task, timeout, search_path)
