"""Façade of the toolchain for tools (CLI, server, agent, runner): compile / simulate / verify / profile a
kernel file against a task, and describe a task.

By default the work goes to the ``Runner`` seam (``runner.py``; today jailed worker processes on this
machine, ``sandbox.py``), so a hostile or broken kernel cannot hang, crash or fool the caller:
``verify`` computes its verdict in this process from the arrays a reference worker and a kernel
worker return (``judge.py``). ``isolate=False`` runs in-process (``in_process.py``; tests and
benchmarks only). Every path returns the same typed result of ``protocol.py`` (``VerifyResult``,
``SimulateResult``, ``CompileResult``, ``ProfileResult``, ``TaskDescription``; ``estimate``: the cost
model's estimate of a trace-only launch, always in this machine's jail); a problem that stops
the job is in its ``problems`` (``result.problem_list()`` as ``errors.Problem``); ``sandbox`` says how
it ran (``bwrap``, ``unsandboxed`` where namespaces are unavailable, ``in-process``).

``hidden_seeds`` adds that many secret seeds to a verification (drawn with ``secrets``, never
reported: ``SeedFigures(seed=None, hidden=True)``), so a kernel that hard-codes the visible seeds'
answers fails. ``search_path`` lists folders the kernel and task may import from after their own
folder (the fix agent verifies a temp copy and passes the user's kernel folder, so sibling helper
modules import; the copy still shadows the user's file of the same name). Those folders are read,
never written.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from nki_agent.toolchain.isolation import runner, sandbox
from nki_agent.toolchain.facts.errors import Problem
from nki_agent.toolchain.judging.in_process import IN_PROCESS
from nki_agent.toolchain.protocol.jobs import (
    CompileResult,
    ProfileResult,
    SimulateResult,
    TaskDescription,
    VerifyResult,
)

DEFAULT_TIMEOUT = sandbox.DEFAULT_TIMEOUT

__all__ = ["DEFAULT_TIMEOUT", "IN_PROCESS", "compile", "describe_task", "estimate", "problems_of", "profile",
           "simulate", "simulate_taskless", "verify"]


def verify(kernel: str, task: str, seeds: int = 3, target: str | None = None, kernel_name: str | None = None,
           isolate: bool = True, timeout: float = DEFAULT_TIMEOUT,
           cancel: threading.Event | None = None, search_path: Sequence[str] = (),
           protect: Sequence[str] = (), hidden_seeds: int = 0) -> VerifyResult:
    """Verify ``kernel`` against ``task`` on ``seeds`` seeds (plus ``hidden_seeds`` secret ones); the
    verdict is computed here.

    ``protect`` names more files the kernel process may not read besides the task (e.g. the user's
    original of a kernel file that is its own task, when a candidate copy is verified)."""
    if not isolate:
        from nki_agent.toolchain.judging import in_process

        return in_process.verify(kernel, task, seeds, target, kernel_name, timeout, search_path, hidden_seeds)
    return runner.current().verify(kernel, task, seeds=seeds, target=target, kernel_name=kernel_name,
                                   timeout=timeout, cancel=cancel, search_path=search_path, protect=protect,
                                   hidden_seeds=hidden_seeds)


def simulate(kernel: str, task: str, target: str | None = None, kernel_name: str | None = None, seed: int = 0,
             isolate: bool = True, timeout: float = DEFAULT_TIMEOUT,
             cancel: threading.Event | None = None, search_path: Sequence[str] = ()) -> SimulateResult:
    """One run of the kernel on the task's inputs for ``seed`` (no reference check): outputs, trace, peaks."""
    if not isolate:
        from nki_agent.toolchain.judging import in_process

        return in_process.simulate(kernel, task, target, kernel_name, seed, timeout, search_path)
    return runner.current().simulate(kernel, task, target=target, kernel_name=kernel_name, seed=seed,
                                     timeout=timeout, cancel=cancel, search_path=search_path)


def simulate_taskless(kernel: str, origin: str | None = None, text: str | None = None, root: str | None = None,
                      target: str | None = None, isolate: bool = True, timeout: float = DEFAULT_TIMEOUT,
                      cancel: threading.Event | None = None, search_path: Sequence[str] = (), via: str = "",
                      kernel_name: str = "") -> SimulateResult:
    """Simulate a kernel file that has no task (``taskless/``): its ``__main__`` driver, else a pytest test
    of the workspace calling its kernel, else the inputs of its shape lines (``# nki: a=(256, 512) float32``)
    — the first that launches a kernel of the file. ``SimulateResult.via`` says which ("none": no inputs).
    ``via`` ("main" / "test" / "shapes") runs only that source; ``kernel_name`` only that kernel's shape line.

    ``origin``: the user's file ``kernel`` is a copy of (the server simulates a copy of the buffer; its name
    and folder find the tests, and the copy is what the tests import), ``text`` its text; ``root``: the
    workspace, searched for tests when the kernel is inside it (else the kernel's folder). Always on this
    machine's jail (or in process with ``isolate=False``): a remote runner needs a task."""
    from . import taskless

    timeout_each = timeout

    def run_one(req: dict[str, object]) -> SimulateResult:
        if not isolate:
            from nki_agent.toolchain.judging import in_process

            return in_process.taskless(dict(req, time_limit=max(timeout_each - 2.0, timeout_each * 0.9)))
        return runner.LocalRunner().taskless(dict(req), timeout=timeout_each, cancel=cancel)

    return taskless.simulate(kernel, run_one, origin=origin, text=text, root=root, target=target,  # type: ignore[no-any-return]
                             search_path=search_path, via=via, kernel_name=kernel_name)


def estimate(kernel: str, task: str, target: str | None = None, kernel_name: str | None = None, seed: int = 0,
             timeline: bool = False, isolate: bool = True, timeout: float = DEFAULT_TIMEOUT,
             cancel: threading.Event | None = None, search_path: Sequence[str] = (),
             sensitivities: bool = False) -> SimulateResult:
    """The cost model's estimate of one launch on ``seed``'s inputs (``SimulateResult.estimate``, None when
    the kernel does not run or the model fails), ``timeline`` with its engine timeline, ``sensitivities``
    with the latency's sensitivity to each free constant (what ``cost.calibration.fit`` re-predicts it
    from): a trace-only run (values are not computed where that is expensive, so the outputs are
    meaningless).

    Always on this machine's jail (``runner.LocalRunner``), never the installed runner: an estimate is a
    model of the target and needs no device, and a remote runner's measurement must not be mixed with it."""
    if not isolate:
        from nki_agent.toolchain.judging import in_process

        return in_process.simulate(kernel, task, target, kernel_name, seed, timeout, search_path, estimate=True,
                                   timeline=timeline, arithmetic=False, sensitivities=sensitivities)
    return runner.LocalRunner().simulate(kernel, task, target=target, kernel_name=kernel_name, seed=seed,
                                         timeout=timeout, cancel=cancel, search_path=search_path, estimate=True,
                                         timeline=timeline, arithmetic=False, sensitivities=sensitivities)


def compile(kernel: str, task: str, target: str | None = None, kernel_name: str | None = None,
            isolate: bool = True, timeout: float = DEFAULT_TIMEOUT, cancel: threading.Event | None = None,
            search_path: Sequence[str] = ()) -> CompileResult:
    """Does the kernel compile? On the embedded toolchain: a simulated launch on seed 0's inputs
    (``compiled`` = it ran and no problem is an error; ``stage`` "compiled" or "none")."""
    if not isolate:
        from nki_agent.toolchain.judging import in_process
        from nki_agent.toolchain.judging.results import compile_result

        res = in_process.verify(kernel, task, 1, target, kernel_name, timeout, search_path)
        return compile_result(res, kernel_name)
    return runner.current().compile(kernel, task, target=target, kernel_name=kernel_name, timeout=timeout,
                                    cancel=cancel, search_path=search_path)


def profile(kernel: str, task: str, seeds: int = 3, target: str | None = None, kernel_name: str | None = None,
            isolate: bool = True, timeout: float = DEFAULT_TIMEOUT, cancel: threading.Event | None = None,
            search_path: Sequence[str] = (), protect: Sequence[str] = (), hidden_seeds: int = 0,
            warmup: int = 5, iterations: int = 50) -> ProfileResult:
    """``verify``'s figures plus the kernel's latency. Locally nothing is measured: ``latency.kind`` is
    "not measured" (the cost model's estimate goes in ``results.estimate_latency``); a device runner
    times ``warmup`` + up to ``iterations`` runs."""
    if not isolate:
        from nki_agent.toolchain.judging import in_process
        from nki_agent.toolchain.judging.results import profile_result

        return profile_result(in_process.verify(kernel, task, seeds, target, kernel_name, timeout, search_path,
                                                hidden_seeds))
    return runner.current().profile(kernel, task, seeds=seeds, target=target, kernel_name=kernel_name,
                                    timeout=timeout, cancel=cancel, search_path=search_path, protect=protect,
                                    hidden_seeds=hidden_seeds, warmup=warmup, iterations=iterations)


def describe_task(task: str, isolate: bool = True, timeout: float = 30.0,
                  search_path: Sequence[str] = ()) -> TaskDescription:
    """The task's inputs (shape, dtype per argument, seed 0) and settings, for prompts and hovers."""
    if not isolate:
        from nki_agent.toolchain.judging import in_process

        return in_process.describe(task, search_path)
    return runner.current().describe(task, timeout=timeout, search_path=search_path)


def problems_of(result: VerifyResult | SimulateResult | CompileResult | TaskDescription) -> list[Problem]:
    """The result's problems as ``errors.Problem`` (the same as ``result.problem_list()``)."""
    return result.problem_list()
