"""The ``Runner`` seam: where the tools' jailed compile / simulate / verify / profile / describe jobs run.

``api.compile`` / ``api.simulate`` / ``api.verify`` / ``api.profile`` / ``api.describe_task`` (what the
CLI, the language server, the fix agent and the benchmarks call) hand every isolated job to
``current()``. The default is ``LocalRunner``: jailed workers on this machine (``sandbox.py``,
verdicts judged here by ``judge.py``). A remote runner (``runner/client.py``: an HTTP service on a
Trainium host) implements the same protocol and is installed with ``use``; callers do not change.

Every method answers with a model of ``protocol.py`` and never raises for a failure of user code (it
is the result's ``problems``). Arguments after ``kernel`` / ``task`` are keyword-only and their
names are stable:

- ``seeds``: visible seeds ``0..seeds-1``; ``hidden_seeds``: that many more secret seeds drawn by
  the runner, reported without their values (``SeedFigures.hidden``);
- ``target`` (trn1 / trn2 / trn3, None: the task's or the kernel's), ``kernel_name`` (None: the task's
  ``KERNEL`` or the only kernel), ``seed`` (simulate: the seed of the inputs);
- ``timeout`` (seconds of wall time per job), ``cancel`` (set: the job is killed, ``sim_cancelled``);
- ``search_path`` (folders the kernel and task may import from after their own; read, never
  written), ``protect`` (more files the kernel's process may not read besides the task);
- ``warmup`` / ``iterations`` (profile: timed runs on a device; the local runner measures nothing).

The workers write plain JSON; ``LocalRunner`` validates it into the models (``results.parse``): a
reply that does not validate is a ``sim_worker_crash`` problem, never an exception.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Protocol

from nki_agent.toolchain.isolation import sandbox
from nki_agent.toolchain.facts.errors import Problem
from nki_agent.toolchain.protocol.jobs import (
    CompileResult,
    ProblemInfo,
    ProfileResult,
    SimulateResult,
    TaskDescription,
    VerifyResult,
)


class Runner(Protocol):
    """Runs untrusted kernel and task code somewhere safe and answers with the protocol's result models."""

    name: str

    def verify(self, kernel: str, task: str, *, seeds: int, target: str | None, kernel_name: str | None,
               timeout: float, cancel: threading.Event | None, search_path: Sequence[str],
               protect: Sequence[str], hidden_seeds: int) -> VerifyResult: ...

    def simulate(self, kernel: str, task: str, *, target: str | None, kernel_name: str | None, seed: int,
                 timeout: float, cancel: threading.Event | None, search_path: Sequence[str]) -> SimulateResult: ...

    def compile(self, kernel: str, task: str, *, target: str | None, kernel_name: str | None, timeout: float,
                cancel: threading.Event | None, search_path: Sequence[str]) -> CompileResult: ...

    def profile(self, kernel: str, task: str, *, seeds: int, target: str | None, kernel_name: str | None,
                timeout: float, cancel: threading.Event | None, search_path: Sequence[str],
                protect: Sequence[str], hidden_seeds: int, warmup: int, iterations: int) -> ProfileResult: ...

    def describe(self, task: str, *, timeout: float, search_path: Sequence[str]) -> TaskDescription: ...


def _body(reply: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """The worker's result (or its problem) over ``base``, with how it ran (``sandbox``, ``stderr``)."""
    run = {"sandbox": str(reply.get("sandbox", "")), "stderr": str(reply.get("stderr", ""))}
    result = reply.get("result")
    if isinstance(result, dict):
        return dict(result, **run)
    out = dict(base, **run)
    if "problem" in reply:
        out["problems"] = [reply["problem"]]
    else:
        p = Problem(str(reply.get("code", "sim_worker_crash")), str(reply.get("error", "simulation failed")))
        out["problems"] = [ProblemInfo.of(p).model_dump()]
    return out


def _with_search_path(req: dict[str, Any], search_path: Sequence[str]) -> dict[str, Any]:
    if search_path:
        req["search_path"] = [str(p) for p in search_path]
    return req


class LocalRunner:
    """Jailed workers on this machine (``unsandboxed`` plain workers where namespaces are unavailable)."""

    name = "local"

    def verify(self, kernel: str, task: str, *, seeds: int = 3, target: str | None = None,
               kernel_name: str | None = None, timeout: float = sandbox.DEFAULT_TIMEOUT,
               cancel: threading.Event | None = None, search_path: Sequence[str] = (),
               protect: Sequence[str] = (), hidden_seeds: int = 0) -> VerifyResult:
        from nki_agent.toolchain.judging.judge import verify as judged

        return judged(kernel, task, seeds, target, kernel_name, timeout, cancel, search_path, protect,
                      hidden_seeds=hidden_seeds)

    def simulate(self, kernel: str, task: str, *, target: str | None = None, kernel_name: str | None = None,
                 seed: int = 0, timeout: float = sandbox.DEFAULT_TIMEOUT, cancel: threading.Event | None = None,
                 search_path: Sequence[str] = (), estimate: bool = True, timeline: bool = False,
                 arithmetic: bool = True, sensitivities: bool = False) -> SimulateResult:
        """``estimate`` (on by default, as in verification): the cost model's estimate of the launch (``SimulateResult.estimate``), ``timeline``
        with its engine timeline, ``sensitivities`` with the latency's sensitivity to each free constant;
        ``arithmetic=False`` a trace-only run (outputs meaningless). These are this runner's own
        (``api.estimate``), not part of the ``Runner`` protocol."""
        from nki_agent.toolchain.judging.results import parse

        if estimate and arithmetic and not timeline and not sensitivities:  # what every tool asks: traced, executed
            from nki_agent.toolchain.judging import judge

            return judge.simulate(kernel, task, seed, target, kernel_name, timeout, cancel, search_path)
        # the cost model's own runs (api.estimate: a timeline, sensitivities, trace-only): the kernel's one jail
        base = {"kernel": kernel, "task": task}
        req: dict[str, Any] = {"op": "simulate", "kernel": kernel, "task": task, "target": target, "kernel_name": kernel_name,
               "seed": seed, "estimate": bool(estimate), "timeline": bool(timeline), "arithmetic": bool(arithmetic),
               "sensitivities": bool(sensitivities)}
        if estimate:
            from nki_agent.toolchain.cost.calibration import request_field

            req.update(request_field())
        reply = sandbox.run(_with_search_path(req, search_path), timeout=timeout, cancel=cancel)
        return parse(SimulateResult, _body(reply, base), dict(base, sandbox=str(reply.get("sandbox", ""))), kernel)

    def compile(self, kernel: str, task: str, *, target: str | None = None, kernel_name: str | None = None,
                timeout: float = sandbox.DEFAULT_TIMEOUT, cancel: threading.Event | None = None,
                search_path: Sequence[str] = ()) -> CompileResult:
        """A launch on seed 0's inputs through the judged path (the kernel's process never has the task)."""
        from nki_agent.toolchain.judging.results import compile_result

        res = self.verify(kernel, task, seeds=1, target=target, kernel_name=kernel_name, timeout=timeout,
                          cancel=cancel, search_path=search_path)
        return compile_result(res, kernel_name)

    def profile(self, kernel: str, task: str, *, seeds: int = 3, target: str | None = None,
                kernel_name: str | None = None, timeout: float = sandbox.DEFAULT_TIMEOUT,
                cancel: threading.Event | None = None, search_path: Sequence[str] = (),
                protect: Sequence[str] = (), hidden_seeds: int = 0, warmup: int = 5,
                iterations: int = 50) -> ProfileResult:
        """The verification's figures; latency "not measured" here (no device, no cost model yet)."""
        from nki_agent.toolchain.judging.results import profile_result

        return profile_result(self.verify(kernel, task, seeds=seeds, target=target, kernel_name=kernel_name,
                                          timeout=timeout, cancel=cancel, search_path=search_path,
                                          protect=protect, hidden_seeds=hidden_seeds))

    def taskless(self, request: dict[str, Any], *, timeout: float = sandbox.DEFAULT_TIMEOUT,
                 cancel: threading.Event | None = None) -> SimulateResult:
        """One task-less run (a ``taskless.request``: the file's ``__main__`` driver, a pytest test, its shape
        lines) in a jailed worker. This runner's own, not part of the ``Runner`` protocol: a remote runner
        needs a task."""
        from nki_agent.toolchain.cost.calibration import request_field
        from nki_agent.toolchain.judging.results import parse

        kernel = str(request.get("kernel", ""))
        base = {"kernel": kernel, "task": "", "via": request.get("via", "none")}
        reply = sandbox.run(dict(request, **request_field()), timeout=timeout, cancel=cancel)  # the estimate's constants
        return parse(SimulateResult, _body(reply, base), dict(base, sandbox=str(reply.get("sandbox", ""))), kernel)

    def describe(self, task: str, *, timeout: float = 30.0, search_path: Sequence[str] = ()) -> TaskDescription:
        from nki_agent.toolchain.judging.results import parse

        base = {"task": task}
        reply = sandbox.run(_with_search_path({"op": "describe", "task": task}, search_path), timeout=timeout)
        return parse(TaskDescription, _body(reply, base), dict(base, sandbox=str(reply.get("sandbox", ""))), task)


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
