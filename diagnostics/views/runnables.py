"""Runnable lenses (rust-analyzer's "▶ Run | Debug") as a pure function of what is known about a document: over
every kernel, ``▶ Simulate`` with what it would run on, and — for the kernel its task runs — ``Verify`` and
``Profile``; over an ``if __name__ == "__main__":`` block, ``▶ Run __main__ (simulated)``.

What ``▶ Simulate`` of a kernel runs, in order: the task, when the task runs that kernel; else the kernel's
shape line (``# nki: a=(128, 512) float32``); else the workspace test the file has; else — with no task for
the file — its ``__main__`` driver. A kernel none of these reaches gets "▶ Simulate: needs a shape line",
which says how to give it inputs (Add input shapes is the quick fix on its ``def``). Runnable titles never
start with "NKI" (the status lenses of ``lens.py`` do). On a line with a status lens, which runs Verify
itself, the server leaves out ``Verify`` and the inputs hint. The server runs each as a
command (``server/handlers/runnables.py``); these functions only decide what is offered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...toolchain import taskless

SIMULATE, VERIFY, PROFILE = "simulate", "verify", "profile"


@dataclass(frozen=True)
class Runnable:
    line: int  # 1-based line the lens sits on (a kernel's ``def``, or the ``if __name__`` line)
    title: str
    tooltip: str
    action: str  # simulate | verify | profile | inputs (nothing runs: a hint)
    kernel: str = ""  # the kernel it runs ("" the file's driver)
    via: str = ""  # what a simulate runs: task | shapes | test | main


def runnables(kernels: Sequence[tuple[str, int]], has_task: bool, task_kernels: Sequence[str],
              facts: taskless.Facts | None) -> list[Runnable]:
    """The runnable lenses of a document: ``kernels`` as (name, def line); ``task_kernels`` the kernel the task
    names (() unknown: then the task runs the file's only kernel, else every kernel is offered the task);
    ``facts`` what a task-less run could use (shape lines, tests, ``__main__``)."""
    names = [n for n, _ in kernels]
    by_task = set(task_kernels) & set(names) if has_task else set()
    if has_task and not by_task:
        by_task = set(names)  # the task's KERNEL is unknown: it may run any of them
    shapes = {s.kernel for s in facts.shapes.values()} if facts is not None else set()
    tests = facts.tests if facts is not None else []
    main = facts.main_line if facts is not None else 0
    out: list[Runnable] = []
    for name, line in kernels:
        if name in by_task:
            out.append(Runnable(line, "▶ Simulate", f"Simulate {name} on its task's inputs (seed 0; no reference "
                                "check)", SIMULATE, name, "task"))
            out.append(Runnable(line, "Verify", f"Verify {name} against its task's reference (3 seeds)", VERIFY, name))
            out.append(Runnable(line, "Profile", f"Verify {name} and report its latency (measured on the runner "
                                "when one is set, else the cost model's estimate)", PROFILE, name))
        elif name in shapes:
            out.append(Runnable(line, "▶ Simulate", f"Simulate {name} on random inputs of its shape line "
                                "(self-reported: nothing is compared)", SIMULATE, name, "shapes"))
        elif tests:
            out.append(Runnable(line, "▶ Simulate", f"Simulate the file through {tests[0].label}", SIMULATE,
                                name, "test"))
        elif main and not has_task:
            out.append(Runnable(line, "▶ Simulate", "Simulate the file's __main__ driver", SIMULATE, name, "main"))
        else:
            out.append(Runnable(line, "▶ Simulate: needs a shape line", f"Nothing runs {name} yet: add a shape "
                                "line above it (`# nki: a=(128, 512) float32`; the quick fix Add input shapes on "
                                "its def) or a task (`# nki-task: PATH`)", "inputs", name, "shapes"))
    if main:
        out.append(Runnable(main, "▶ Run __main__ (simulated)", "Run the file's __main__ driver with NKI "
                            "simulated, in the sandbox (its own checks are the verdict: self-reported)",
                            SIMULATE, "", "main"))
    return out
