"""Code lens content as a pure function of a ``DocumentView``: above the kernel ``def`` that ran, the last verification and a Verify command, with
the cost model's estimate of that kernel appended ("· ≈ 6.97 ms est. trn1", always "est.");
with a remote runner, a second lens ("NKI runner: ...") with its verdict and latency as the runner reports
it — the two are never merged. Both titles stay short enough to share the line (verdict, target, headline
figure); the full text — backend, every code, what bounds the estimate, the runner's whole latency — is the
lens command's tooltip.

Only the kernels a run ran carry its lens (a file with two kernels whose task, driver or shape line runs one
marks that one); before any run, or when it is not known which kernel ran, every kernel has it. A kernel
with no task says plainly what saving runs or ran ("simulated via __main__", "simulated via
test_add.py::test_add", "simulated from the shape line", "no inputs: add a shape line or a task"); a ✓ of
such a run says whose word it is ("its checks pass — self-reported by the file": the file's own code ran in
the worker that reported it, ``toolchain.taskless.claim``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...toolchain import taskless
from ...toolchain.protocol.jobs import ProfileResult, SimulateResult, VerifyResult
from ..cost_view import CostView
from .context import DocumentView
from .runs import RunResult


@dataclass(frozen=True)
class Lens:
    line: int  # 1-based line of the kernel's ``def``
    title: str
    tooltip: str
    kind: str  # "local" | "remote"


def lenses(view: DocumentView, backend: str, has_task: bool, task_kernels: Sequence[str] = (),
           taskless_facts: taskless.Facts | None = None) -> list[Lens]:
    """The lenses of the document: over each kernel its last run ran (every kernel while that is unknown), the
    local verdict (or what a task-less save runs / ran), then the runner's when there is one. ``task_kernels``:
    the kernel the task names (``analysis.task_kernels``), for a kernel not run yet."""
    run, sim, remote = view.runs.get("verify"), view.runs.get("simulate"), view.runs.get("remote")
    kernels = view.facts.kernels
    names = [k.name for k in kernels]
    estimated = view.cost.kernel_line([(k.name, k.line) for k in kernels]) if view.cost else None
    no_task = not has_task
    # a file with a task whose other kernel a runnable lens simulated from its shape line: that run's lens goes
    # on the kernels it launched, the task's lens stays where it was
    side = sim if has_task and sim is not None and sim.via != "task" else None
    if side is not None:
        sim = None
    if no_task and sim is not None and sim.via != "task":
        shown = marked(sim, names) if sim.result.via != "none" else set(names)
    elif run is None and sim is None and has_task:  # not run yet: the kernel its task names
        shown = set(task_kernels) & set(names) or set(names)
    else:
        shown = marked(run or sim, names)
    out = []
    for k in kernels:
        if side is not None and k.name in side.kernels and k.name not in task_kernels:
            text = taskless_title(side, backend, taskless_facts, view.cost if k.line == estimated else None)
            out.append(Lens(k.line, text, text, "local"))
            continue
        if k.name not in shown:
            continue
        note_view = view.cost if k.line == estimated else None
        if no_task and run is None:
            text = tip = taskless_title(sim, backend, taskless_facts, note_view)
        else:
            text, tip = title(run, backend, note_view), tooltip(run, backend, note_view)
        out.append(Lens(k.line, text, tip, "local"))
        if remote is not None:
            out.append(Lens(k.line, remote_title(remote), remote_tooltip(remote), "remote"))
    return out


def estimate_note(view: CostView | None) -> str:
    """" · ≈ 6.97 ms est. trn1, TensorE-bound" ("" without an estimate; marked when the text changed since)."""
    if view is None:
        return ""
    return f" · {view.estimate.summary()}" + (" (before your edits)" if view.stale else "")


def short_note(view: CostView | None) -> str:
    """" · ≈ 6.97 ms est. trn1" for a lens title ("" without an estimate; what bounds it is in the tooltip)."""
    if view is None:
        return ""
    return f" · {view.estimate.summary().split(', ')[0]}" + (" (before your edits)" if view.stale else "")


def codes_of(run: RunResult) -> str:
    """The run's diagnostic codes, for a title: the first one and how many more ("failed" without any)."""
    codes = sorted({d.code for d in run.diagnostics})
    return (codes[0] + (f" +{len(codes) - 1}" if len(codes) > 1 else "")) if codes else "failed"


def title(run: RunResult | None, backend: str, view: CostView | None = None, no_task: bool = False) -> str:
    """The local lens's title, short enough to share the line with the runner's lens: the verdict, the target
    and the headline figure; an unsandboxed run says so here. The backend, every code, what bounds the
    estimate and the command are in ``tooltip``."""
    note = short_note(view)
    if run is None and no_task:
        return "NKI: no task found"
    if run is None:
        return f"NKI: not verified{note} — Verify"
    res = run.result
    target = res.target or "?"
    jail = " (UNSANDBOXED)" if res.sandbox == "unsandboxed" else ""
    if isinstance(res, VerifyResult) and res.correct:
        by = " by the agent" if run.by == "agent" else ""
        return f"NKI: ✓ verified on {target}{by}{jail}, max error {res.max_abs_error:.3g}{note}"
    if isinstance(res, VerifyResult) and res.compiled:
        return f"NKI: ✗ wrong result on {target}{jail}, max error {res.max_abs_error:.3g}"
    return f"NKI: ✗ {codes_of(run)}{jail}"


def tooltip(run: RunResult | None, backend: str, view: CostView | None = None, no_task: bool = False) -> str:
    """The local lens's tooltip: verdict (and the estimate, when ``view`` is given) then the Verify command; with
    no task found and nothing run yet it says so plainly (saving has nothing to run against)."""
    note = estimate_note(view)
    if run is None and no_task:
        return "NKI: no task found — add `# nki-task: PATH` or a task.py beside this file to simulate on save"
    if run is None:
        return f"NKI: not verified{note} — Verify"
    res = run.result
    target = res.target or "?"
    if res.sandbox == "unsandboxed":  # namespaces unavailable: say so where the verdict is shown
        backend += ", UNSANDBOXED"
    if isinstance(res, VerifyResult) and res.correct:
        by = ", by the fix agent on this exact text" if run.by == "agent" else ""
        return f"NKI: ✓ verified on {target} ({backend}{by}), max error {res.max_abs_error:.3g}{note} — Verify again"
    if isinstance(res, VerifyResult) and res.compiled:
        return f"NKI: ✗ wrong result on {target} ({backend}), max error {res.max_abs_error:.3g}{note} — Verify again"
    codes = ", ".join(sorted({d.code for d in run.diagnostics})) or "failed"
    return f"NKI: ✗ {codes} ({backend}){note} — Verify again"


def taskless_title(run: RunResult | None, backend: str, facts: taskless.Facts | None,
                   view: CostView | None = None) -> str:
    """The lens of a kernel with no task: what its last save ran and how that went, or (before a save) what
    saving will run; "no inputs: ..." when there is nothing to run it with."""
    note = estimate_note(view)
    if run is None or not isinstance(run.result, SimulateResult) or run.result.via == "task":
        plans = taskless.plans(facts) if facts is not None else []
        if not plans:
            return NO_INPUTS
        how = "from the shape line" if plans[0].via == "shapes" else f"via {plans[0].label}"
        return f"NKI: no task — saving simulates {how}"
    res = run.result
    if res.via == "none":
        return NO_INPUTS
    label = {"main": "__main__", "test": res.via_test or "the test"}.get(res.via, "the shape line")
    how = "from the shape line" if res.via == "shapes" else f"via {label}"
    if res.sandbox == "unsandboxed":
        backend += ", UNSANDBOXED"
    errors = ", ".join(sorted({d.code for d in run.diagnostics if d.severity == "error"}))
    if not res.launches:
        return f"NKI: ✗ {errors or 'nothing ran'} — {label} launched no kernel of this file ({backend}); add a shape " \
               "line or a task"
    if errors:
        return f"NKI: ✗ {errors} — simulated {how} ({backend}){note}"
    checks = facts is None or facts.main_checks
    checked = taskless.claim(res, main_checks=checks)
    return f"NKI: {taskless.glyph(res, checks)} simulated {how} on {res.target or '?'} ({backend}), {checked}{note}"


NO_INPUTS = ("NKI: no inputs: add a shape line or a task — no task found; e.g. `# nki: a=(128, 512) float32` "
             "above the kernel, or `# nki-task: PATH`")


def remote_title(run: RunResult) -> str:
    """The runner lens's title: "NKI runner: ✓ correct · p50 5.21 ms" (the backend and the rest of the latency
    in ``remote_tooltip``; an unsandboxed runner says so here)."""
    res = run.result
    jail = " (UNSANDBOXED)" if res.sandbox == "unsandboxed" else ""
    latency = f" · {res.latency.summary().split(' (')[0]}" if isinstance(res, ProfileResult) else ""
    if isinstance(res, VerifyResult) and res.correct:
        return f"NKI runner: ✓ correct{jail}{latency}"
    if isinstance(res, VerifyResult) and res.compiled:
        return f"NKI runner: ✗ wrong result{jail}, max error {res.max_abs_error:.3g}"
    return f"NKI runner: ✗ {codes_of(run)}{jail}"


def remote_tooltip(run: RunResult) -> str:
    """The remote runner's verdict and latency: "NKI runner: ✓ correct (simulator backend) · p50 ..."."""
    res = run.result
    where = f"{res.backend} backend" + (", UNSANDBOXED" if res.sandbox == "unsandboxed" else "")
    latency = f" · {res.latency.summary()}" if isinstance(res, ProfileResult) else ""
    if isinstance(res, VerifyResult) and res.correct:
        return f"NKI runner: ✓ correct ({where}){latency}"
    if isinstance(res, VerifyResult) and res.compiled:
        return f"NKI runner: ✗ wrong result ({where}), max error {res.max_abs_error:.3g}"
    codes = ", ".join(sorted({d.code for d in run.diagnostics})) or "failed"
    return f"NKI runner: ✗ {codes} ({where})"


def marked(run: RunResult | None, names: list[str]) -> set[str]:
    """The kernels that carry the lens of ``run``: those it ran, when it names any of ``names``; else all."""
    ran = set(run.kernels) & set(names) if run is not None else set()
    return ran or set(names)
