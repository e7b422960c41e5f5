"""verify / simulate / describe in this process (``api``'s ``isolate=False``: tests and benchmarks only).

The same models as the jailed path (``protocol.py``), labelled ``sandbox="in-process"``. Kernel and
task code run here, so only trusted callers use it. Verification mirrors ``judge.py``: seeds
``0..seeds-1`` plus ``hidden_seeds`` secret ones (labelled by position, reported without their
values), the kernel traced on placeholders and its program executed per seed (``trace_roles``), and
the line of each seed's first mismatch from the launch's store log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from nki_agent.toolchain.facts.errors import NkiError, Problem
from nki_agent.toolchain.protocol.jobs import SimulateResult, TaskDescription, VerifyResult

IN_PROCESS = "in-process"


def verify(kernel_path: str, task_path: str, seeds: int, target: str | None, kernel_name: str | None,
           time_limit: float | None, search_path: Sequence[str], hidden_seeds: int = 0) -> VerifyResult:
    from nki_agent.toolchain.judging import verify as v
    from nki_agent.toolchain.judging.results import draw_hidden, verify_result
    from nki_agent.toolchain.judging.roles import launch_records
    from nki_agent.toolchain.sim.stores import line_of
    from nki_agent.toolchain.sim.replay import ProgramDispatch
    from nki_agent.toolchain.tasks import find_kernel, load_module, load_task
    from nki_agent.toolchain.judging.trace_roles import spec_of, traced

    seed_list = list(range(seeds)) + draw_hidden(hidden_seeds, seeds)
    result = v.VerifyResult(kernel=kernel_path, task=task_path, target=target or "")
    lines: dict[int, int] = {}
    try:
        task = load_task(task_path, search_path)
        module = load_module(kernel_path, "nki_agent_kernel", search_path)
        kern = find_kernel(module, kernel_name or task.kernel_name)
    except NkiError as e:
        result.problems.append(Problem.from_error(e))
        return verify_result(result.as_dict(), seeds, sandbox=IN_PROCESS)
    records = launch_records(task)
    dispatch = ProgramDispatch()  # as in the jail: traced once per input signature, the program executed per seed
    programs: dict[str, Any] = {}

    def cases() -> Iterator[v.Case]:
        for label, seed in enumerate(seed_list):
            inputs, expected, t_ref = v.draw(task, seed)
            args = [v._to_np(x) for x in inputs] + [v._to_np(p) for p in task.model_parameters()]
            key = json.dumps([len(inputs), spec_of(args)])
            if key not in programs:
                programs[key] = traced(kern, task, args, len(inputs), target, time_limit)
            dispatch.program = programs[key]
            yield v.Case(label, args, t_ref, expected)

    def judge(label: int, got: list[Any], expected: Any, mutated: list[str]) -> v.SeedResult:
        r = v._compare_all(task, got, expected, label)
        fm, stores = r.first_mismatch, (records[-1].stores if records else [])
        records.clear()
        if fm is not None and getattr(v._to_np(got[fm.output]), "shape", None) == expected[fm.output].shape:
            line = line_of(stores, fm.output, fm.index)
            if line is not None:
                lines[label] = line
        return r

    try:
        result = v.run_cases(dispatch, task, kernel_path, cases(), judge, target, time_limit)  # type: ignore[arg-type]
        result.generation = dispatch.generation
    except NkiError as e:
        result.problems.append(Problem.from_error(e))
    except Exception as e:  # noqa: BLE001 - errors in the task's own code (inputs, reference) are task errors
        result.problems.append(v.task_problem(e, task_path))
    return verify_result(result.as_dict(), seeds, lines, sandbox=IN_PROCESS)


def simulate(kernel_path: str, task_path: str, target: str | None, kernel_name: str | None, seed: int,
             time_limit: float | None, search_path: Sequence[str], estimate: bool = True, timeline: bool = False,
             arithmetic: bool = True, sensitivities: bool = False) -> SimulateResult:
    from nki_agent.toolchain.judging.results import parse
    from nki_agent.toolchain.judging.simulate import simulate_files

    data = dict(simulate_files(kernel_path, task_path, target, kernel_name, seed, time_limit=time_limit,
                               search_path=search_path, estimate=estimate, timeline=timeline,
                               arithmetic=arithmetic, sensitivities=sensitivities), sandbox=IN_PROCESS)
    return parse(SimulateResult, data, {"kernel": kernel_path, "task": task_path, "sandbox": IN_PROCESS},
                 kernel_path, "simulation")


def taskless(request: dict[str, Any]) -> SimulateResult:
    """One task-less run (``taskless.run_job``) here; ``__main__``, ``sys.argv``, ``sys.path`` and the modules
    it imported are put back afterwards (the code still ran in this process: trusted callers only)."""
    from nki_agent.toolchain.judging.results import parse
    from nki_agent.toolchain.taskless import contained, run_job

    kernel = str(request.get("kernel", ""))
    with contained():
        data = dict(run_job(dict(request)), sandbox=IN_PROCESS)
    return parse(SimulateResult, data, {"kernel": kernel, "task": "", "sandbox": IN_PROCESS}, kernel, "simulation")


def describe(task_path: str, search_path: Sequence[str]) -> TaskDescription:
    from nki_agent.toolchain.judging.results import parse
    from nki_agent.toolchain.tasks import describe_task

    data = dict(describe_task(task_path, search_path), sandbox=IN_PROCESS)
    return parse(TaskDescription, data, {"task": task_path, "sandbox": IN_PROCESS}, task_path, "task description")
