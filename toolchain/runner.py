"""The ``Runner`` seam: where the tools' jailed verify / simulate / describe jobs run.

``api.verify`` / ``api.simulate`` / ``api.describe_task`` (what the CLI, the language server, the
fix agent and the benchmarks call) hand every isolated job to ``current()``. The default, and today
the only implementation, is ``LocalRunner``: jailed workers on this machine (``sandbox.py``,
verdicts judged here by ``judge.py``). A remote runner (an HTTP service on a Trainium host)
implements the same protocol and is installed with ``use``; callers do not change.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol

from . import sandbox
from .errors import Problem


class Runner(Protocol):
    """Runs untrusted kernel and task code somewhere safe and answers with the toolchain's result dicts."""

    name: str

    def verify(self, kernel: str, task: str, seeds: int, target: str | None, kernel_name: str | None,
               timeout: float, cancel: threading.Event | None, search_path: Sequence[str],
               protect: Sequence[str]) -> dict[str, Any]: ...

    def simulate(self, kernel: str, task: str, target: str | None, kernel_name: str | None, seed: int,
                 timeout: float, cancel: threading.Event | None, search_path: Sequence[str]) -> dict[str, Any]: ...

    def describe(self, task: str, timeout: float, search_path: Sequence[str]) -> dict[str, Any]: ...


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


class LocalRunner:
    """Jailed workers on this machine (``unsandboxed`` plain workers where namespaces are unavailable)."""

    name = "local"

    def verify(self, kernel: str, task: str, seeds: int, target: str | None, kernel_name: str | None,
               timeout: float, cancel: threading.Event | None, search_path: Sequence[str],
               protect: Sequence[str]) -> dict[str, Any]:
        from .judge import verify as judged

        return judged(kernel, task, seeds, target, kernel_name, timeout, cancel, search_path, protect)

    def simulate(self, kernel: str, task: str, target: str | None, kernel_name: str | None, seed: int,
                 timeout: float, cancel: threading.Event | None, search_path: Sequence[str]) -> dict[str, Any]:
        base = {"kernel": kernel, "task": task, "ran": False, "outputs": [], "problems": []}
        req = {"op": "simulate", "kernel": kernel, "task": task, "target": target, "kernel_name": kernel_name,
               "seed": seed}
        return _merge(sandbox.run(_with_search_path(req, search_path), timeout=timeout, cancel=cancel), base)

    def describe(self, task: str, timeout: float, search_path: Sequence[str]) -> dict[str, Any]:
        base: dict[str, Any] = {"task": task, "inputs": [], "problems": []}
        req = _with_search_path({"op": "describe", "task": task}, search_path)
        return _merge(sandbox.run(req, timeout=timeout), base)


_current: Runner = LocalRunner()
_lock = threading.Lock()


def current() -> Runner:
    return _current


def use(runner: Runner) -> Runner:
    """Install ``runner`` for every later job; returns the previous one (to restore it)."""
    global _current
    with _lock:
        previous, _current = _current, runner
    return previous
