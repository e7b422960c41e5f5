"""Façade of the toolchain for tools (CLI, server, agent): verify / simulate a kernel file against a task.

By default the work runs in jailed worker processes (``sandbox.py``), so a hostile or broken kernel
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

from . import sandbox
from .errors import Problem

DEFAULT_TIMEOUT = sandbox.DEFAULT_TIMEOUT


IN_PROCESS = "in-process"


def _merge(reply: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    if "result" in reply:
        return dict(reply["result"], sandbox=reply.get("sandbox", ""))
    out = dict(base, sandbox=reply.get("sandbox", ""))
    if "problem" in reply:
        out["problems"] = [reply["problem"]]
    else:
        p = Problem(reply.get("code", "sim_worker_crash"), reply.get("error", "simulation failed"))
        out["problems"] = [p.as_dict()]
    return out


def _with_search_path(req: dict[str, Any], search_path: Sequence[str]) -> dict[str, Any]:
    if search_path:
        req["search_path"] = [str(p) for p in search_path]
    return req


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
    from .judge import verify as judged

    return judged(kernel, task, seeds, target, kernel_name, timeout, cancel, search_path, protect)


def simulate(kernel: str, task: str, target: str | None = None, kernel_name: str | None = None, seed: int = 0,
             isolate: bool = True, timeout: float = DEFAULT_TIMEOUT,
             cancel: threading.Event | None = None, search_path: Sequence[str] = ()) -> dict[str, Any]:
    base = {"kernel": kernel, "task": task, "ran": False, "outputs": [], "problems": []}
    if not isolate:
        from .simulate import simulate_files

        return dict(simulate_files(kernel, task, target, kernel_name, seed, time_limit=timeout,
                                   search_path=search_path), sandbox=IN_PROCESS)
    req = {"op": "simulate", "kernel": kernel, "task": task, "target": target, "kernel_name": kernel_name, "seed": seed}
    return _merge(sandbox.run(_with_search_path(req, search_path), timeout=timeout, cancel=cancel), base)


def problems_of(result: dict[str, Any]) -> list[Problem]:
    return [Problem.from_dict(p) for p in result.get("problems", [])]


def describe_task(task: str, isolate: bool = True, timeout: float = 30.0,
                  search_path: Sequence[str] = ()) -> dict[str, Any]:
    """The task's inputs (shape, dtype per argument, seed 0) and settings, for prompts and hovers."""
    base: dict[str, Any] = {"task": task, "inputs": [], "problems": []}
    if not isolate:
        from .tasks import describe_task as describe

        return describe(task, search_path)
    return _merge(sandbox.run(_with_search_path({"op": "describe", "task": task}, search_path), timeout=timeout), base)
