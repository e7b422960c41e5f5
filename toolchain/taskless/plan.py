"""The parent side of a task-less run: what the buffer offers (``read_facts`` -> ``Facts``), the ways to run it in
order (``plans``: ``main``, ``test``, ``shapes``), the worker request of one (``request``) and ``simulate``, which
tries them until one launches a kernel of the file. Pure planning: it reads the buffer and the workspace's test
files, never executes them (``run_one``, the caller's, sends each request to a worker: the jailed one of
``api.simulate_taskless`` starts a fresh one per plan, so a test never runs in the process of the file's
``__main__`` driver). What ran is the parent's word (``stamp``), never the worker's."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .shape_lines import ShapeProblem, ShapeSpec, shape_specs
from .source import KernelDef, has_main, kernel_defs, main_checks, parse
from .workspace_tests import TestRef, find_tests, module_names, test_scope

MAIN, TEST, SHAPES, NONE = "main", "test", "shapes", "none"


@dataclass(frozen=True)
class Plan:
    """One way to run the file without a task."""

    via: str  # main | test | shapes
    test: TestRef | None = None
    shapes: tuple[ShapeSpec, ...] = ()

    @property
    def label(self) -> str:
        return {MAIN: "__main__", SHAPES: "the shape line"}.get(self.via, self.test.label if self.test else "")


@dataclass
class Facts:
    """What planning read from the buffer (also what the "Add input shapes" action needs)."""

    kernels: list[KernelDef] = field(default_factory=list)
    main_line: int = 0
    shapes: dict[str, ShapeSpec] = field(default_factory=dict)
    shape_problems: list[ShapeProblem] = field(default_factory=list)
    tests: list[TestRef] = field(default_factory=list)
    main_checks: bool = False  # the driver asserts something itself (``main_checks``)


def read_facts(kernel_path: str, text: str, root: str | None, tests: bool = True) -> Facts:
    tree = parse(text)
    kernels = kernel_defs(tree, text)
    shapes, problems = shape_specs(text, tree, kernels)
    found = find_tests(kernel_path, [k.name for k in kernels], root) if tests and tree is not None else []
    return Facts(kernels, has_main(tree), shapes, problems, found, main_checks(tree))


def plans(facts: Facts, via: str = "", kernel_name: str = "") -> list[Plan]:
    """The ways to run the file, in order: its ``__main__`` driver, the best test, its shape lines. ``via``
    keeps only that way (a runnable lens: "▶ Run __main__", "▶ Simulate" from a shape line); ``kernel_name``
    keeps only that kernel's shape line."""
    out = []
    if facts.main_line and via in ("", MAIN):
        out.append(Plan(MAIN))
    if facts.tests and via in ("", TEST):
        out.append(Plan(TEST, test=facts.tests[0]))
    specs = [s for s in facts.shapes.values() if not kernel_name or s.kernel == kernel_name]
    if specs and via in ("", SHAPES):
        order = {k.name: k.line for k in facts.kernels}
        out.append(Plan(SHAPES, shapes=tuple(sorted(specs, key=lambda s: order.get(s.kernel, s.line)))))
    return out


def request(plan: Plan, kernel: str, origin: str, root: str | None, target: str | None,
            search_path: Sequence[str]) -> dict[str, Any]:
    """The worker request running ``plan`` on ``kernel`` (a copy of ``origin``, the user's file)."""
    req: dict[str, Any] = {"op": "taskless", "via": plan.via, "kernel": kernel, "target": target,
                           "search_path": [str(p) for p in search_path]}
    if plan.test is not None:
        scope = test_scope(origin, root)
        req.update(task=plan.test.path, test=f"{plan.test.path}::{plan.test.node}", test_label=plan.test.label,
                   rootdir=scope, modules=module_names(origin))
        extra = [os.path.dirname(plan.test.path), scope]
        req["search_path"] = list(dict.fromkeys(req["search_path"] + extra))
    return req


def simulate(kernel: str, run_one: Callable[[dict[str, Any]], Any], origin: str | None = None, text: str | None = None,
             root: str | None = None, target: str | None = None, search_path: Sequence[str] = (), via: str = "",
             kernel_name: str = "") -> Any:
    """Run ``kernel`` without a task (the first plan that launches a kernel of the file; ``run_one`` runs one
    worker request and returns its ``SimulateResult``). ``origin``: the user's file ``kernel`` is a copy of
    (its name and folder find the tests); ``text``: its text (default: read ``kernel``); ``via`` /
    ``kernel_name``: only those plans (``plans``)."""
    from nki_agent.toolchain.facts.errors import NkiError, Problem, SourceLocation
    from nki_agent.toolchain.protocol.jobs import ProblemInfo, SimulateResult
    from ..tasks import _read_source

    origin = origin or kernel
    if text is None:
        try:
            text = _read_source(kernel)
        except NkiError as e:  # a missing, binary or huge file
            return SimulateResult(kernel=kernel, via="none", problems=[ProblemInfo.of(Problem.from_error(e))])
    facts = read_facts(origin, text, root)
    shape_problems = [ProblemInfo.of(Problem("sim_bad_input", sp.message, "warning",
                                             SourceLocation(kernel, sp.line, sp.column, sp.line, sp.end_column)))
                      for sp in facts.shape_problems]
    first = None
    tried: list[str] = []
    for plan in plans(facts, via, kernel_name):
        res = stamp(run_one(request(plan, kernel, origin, root, target, search_path)), plan, kernel)
        res.tried = list(tried)
        if res.launches or _stopped_in_kernel(res, kernel):
            res.problems = res.problems + shape_problems
            return res
        tried.append(f"{plan.label} launched no kernel of this file")
        first = first or res
    if first is not None:
        first.tried = tried
        first.problems = first.problems + shape_problems
        return first
    return SimulateResult(kernel=kernel, via="none", problems=shape_problems)


def stamp(res: Any, plan: Plan, kernel: str) -> Any:
    """``res`` (a worker's ``SimulateResult`` for ``plan``) with what the parent knows put over what the reply
    says: what ran (``via``, ``via_test``: the plan this worker was asked to run, so a ``__main__`` driver's
    forged reply cannot claim to be a test), which file, and that the verdict is self-reported — every plan
    runs the file's own code in the worker that answers (its driver; the test, which imports the file; the
    module of its shape lines), so anything in the reply the file could have written."""
    res.via = plan.via
    res.via_test = plan.test.label if plan.test is not None else ""
    res.kernel = kernel
    res.self_reported = True
    return res


def _stopped_in_kernel(res: Any, kernel: str) -> bool:
    """An NKI error located in the kernel file stops the search (the driver reached a kernel and it failed)."""
    for p in res.problems:
        loc = p.location
        if p.severity == "error" and loc is not None and _same(loc.path, kernel) and p.code.startswith(("err_", "sim_")) \
                and p.code not in ("sim_python_exception", "sim_task_error", "sim_bad_input", "sim_syntax_error"):
            return True
        if p.code in ("sim_syntax_error", "sim_timeout", "sim_memory_limit", "sim_worker_crash", "sim_cancelled",
                      "sim_output_limit"):
            return True  # the file itself does not run (or the run was stopped): another source would not help
    return False


def _same(a: str, b: str) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return a == b


__all__ = ["MAIN", "NONE", "SHAPES", "TEST", "Facts", "Plan", "plans", "read_facts", "request", "simulate", "stamp"]
