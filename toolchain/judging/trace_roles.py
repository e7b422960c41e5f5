"""The kernel's side of a verification, split in two: trace where the kernel runs, execute where it cannot.

``trace_role`` (kernel code only, in the kernel's jail, the task file closed): load the kernel, then for
each ``spec`` frame the parent sends — the shapes and dtypes of one seed's arrays, never their values —
launch the kernel on zero-filled placeholders with a ``sim.record.Recorder`` and send back the traced
program (``sim.program``) packed as bytes. One program serves every seed whose arrays have the same
shapes and dtypes. Trace-time errors (shapes, partitions, memories, ...) are the role's problems.

``executor_role`` (no user code at all, in its own jail): receive the task's settings, the kernel's
source text (for messages only), the program, then each seed's arrays; execute the program on them
(``sim.replay``) and send per seed the outputs, the arguments as they are afterwards and the store log,
the same ``run`` frames the parent's judge (``judge.py``) compared before; the first seed is also
traced for the cost model, whose failure never touches the verdict. The executor's own process holds
nothing the kernel wrote but the program, which it validates call by call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nki_agent.toolchain.facts.errors import NkiError, Problem, SourceLocation

Frames = Callable[[], tuple[dict[str, Any], list[np.ndarray | None]]]
Emit = Callable[[dict[str, Any], list[np.ndarray | None]], None]
MAX_SPECS = 16  # distinct input signatures one verification may trace


def spec_of(arrays: list[np.ndarray]) -> list[dict[str, Any]]:
    """Shapes and dtypes of a seed's arrays: all the kernel's process learns of them."""
    from nki_agent.toolchain.facts import dtypes

    return [{"shape": [int(d) for d in a.shape], "dtype": dtypes.name(a.dtype)} for a in arrays]


def placeholders(spec: list[dict[str, Any]]) -> list[np.ndarray]:
    """Zero-filled arrays of the given shapes and dtypes (the pages are not touched until written)."""
    from nki_agent.toolchain.facts import dtypes

    return [np.zeros(tuple(int(d) for d in s["shape"]), dtype=dtypes.as_dtype(s["dtype"])) for s in spec]


def trace_kernel(kernel: Any, task: Any, arrays: list[np.ndarray], n_inputs: int, target: str | None,
                 time_limit: float | None) -> Any:
    """Launch ``kernel`` on ``arrays`` (placeholders: inputs, then model parameters) through ``task``'s
    launcher while recording; the traced ``Program``. Raises the kernel's trace-time ``NkiError``."""
    from nki_agent.toolchain.sim.kernel import DEFAULTS, LaunchDefaults, LaunchRecord, kernel_location
    from nki_agent.toolchain.sim.record import Recorder
    from nki_agent.toolchain.judging.verify import select_params

    rec = Recorder(arrays)
    records: list[LaunchRecord] = []
    call = list(arrays[:n_inputs]) + select_params(kernel, list(arrays[n_inputs:]), n_inputs)
    token = DEFAULTS.set(LaunchDefaults(target=target or task.target, time_limit=time_limit, arithmetic=False,
                                        recorder=rec, observer=records.append))
    try:
        task.launcher(kernel)(*call)
    finally:
        DEFAULTS.reset(token)
    if not records:
        raise NkiError("sim_worker_crash", "the kernel's launch left no record", kernel_location(kernel))
    r = records[-1]
    loc = kernel_location(kernel)
    code = getattr(kernel.func, "__code__", None)
    return rec.program(kernel.__name__, code.co_filename if code else "", loc.line if loc else 1, r.generation,
                       r.target, tuple(r.grid), [])


def traced(kernel: Any, task: Any, arrays: list[np.ndarray], n_inputs: int, target: str | None,
           time_limit: float | None) -> Any:
    """In this process (trusted callers): trace on placeholders shaped like ``arrays``, round-trip the program
    through its wire form and return the ``ProgramKernel`` that executes it."""
    from nki_agent.toolchain.protocol.program import unpack, pack
    from nki_agent.toolchain.sim.replay import ProgramKernel

    program = trace_kernel(kernel, task, placeholders(spec_of(arrays)), n_inputs, target, time_limit)
    return ProgramKernel(unpack(pack(program)))


def _preload_torch(kernel_path: str, search_path: Any = ()) -> None:
    """Import torch before the tripwire is armed when the kernel's sources mention it (it loads native code); the
    cost model is not needed here: it runs in the executor. The simulator is (``roles.preload_simulator``)."""
    from nki_agent.toolchain.judging.roles import kernel_sources, preload_simulator

    text = kernel_sources(kernel_path, search_path)
    preload_simulator(text)
    if "torch" in text:
        try:
            import torch  # noqa: F401
        except Exception:  # noqa: BLE001 - not installed: the kernel's own import will say so
            pass


def trace_role(req: dict[str, Any], next_frame: Frames, emit: Emit) -> tuple[dict[str, Any], list[np.ndarray | None]]:
    """Load the kernel (the tamper scan and the audit-hook tripwire of ``roles.kernel_role``: clear messages for
    attempts, not the boundary), then one ``program`` frame per ``spec`` frame."""
    from nki_agent.toolchain.isolation import guard
    from nki_agent.toolchain.judging.roles import _refuse_tampering, _task_settings
    from nki_agent.toolchain.protocol.program import ProgramError, pack
    from nki_agent.toolchain.tasks import find_kernel, load_module, search_path

    kernel_path = req["kernel"]
    problems: list[Problem] = []
    traced = 0
    _preload_torch(kernel_path, search_path(req))
    guard.install(req.get("scratch_dir") or "/job/out", [])
    try:
        _refuse_tampering(kernel_path)
        module = load_module(kernel_path, "nki_agent_kernel", search_path(req))
        header, _ = next_frame()
        settings = _task_settings(header.get("settings") or {})
        kernel = find_kernel(module, req.get("kernel_name") or settings.kernel_name)
        while traced < MAX_SPECS:
            frame, _ = next_frame()
            if frame.get("kind") != "spec":
                break
            arrays = placeholders(list(frame["spec"]))
            program = trace_kernel(kernel, settings, arrays, int(frame["inputs"]), req.get("target"),
                                   req.get("time_limit"))
            try:
                blob = pack(program)
            except ProgramError as e:
                raise NkiError("sim_memory_limit", str(e), SourceLocation(kernel_path, program.def_line)) from None
            emit({"kind": "program", "key": frame.get("key")}, [blob])
            traced += 1
            del program, arrays
    except NkiError as e:
        problems.append(Problem.from_error(e))
    except Exception as e:  # noqa: BLE001 - a bug of ours, or kernel code that broke the toolchain
        problems.append(Problem("sim_python_exception", f"{type(e).__name__}: {e}", location=SourceLocation(kernel_path, 1)))
    seen = guard.violations()
    if seen and not any(p.code == "sim_sandbox_violation" for p in problems):
        # a tripwire is reported as what it is; the verdict stays the traced program's (nothing this process
        # did can change what the executor computes from it)
        problems.append(Problem("sim_sandbox_violation", "the sandbox refused " + "; ".join(seen[:5]) +
                                " (the verdict is the traced NKI program's)", "warning",
                                location=SourceLocation(kernel_path, 1)))
    for i, p in enumerate(problems):
        if p.code == "sim_python_exception" and "SandboxViolation" in p.message:
            problems[i] = Problem("sim_sandbox_violation", p.message, p.severity, p.location, p.related)
    return {"ok": True, "kind": "done", "traced": traced, "problems": [p.as_dict() for p in problems]}, []


def _warm(run: bool = False) -> None:
    """Import the cost model and build both generations' NKI namespaces before the first program arrives;
    ``run``: also trace and execute the toolchain's own warm-up kernel (a warm executor, ``judging/warmup.py``)."""
    from nki_agent.toolchain.sim import runtime
    from nki_agent.toolchain.sim.replay import _namespaces

    for generation in (runtime.NEW, runtime.CLASSIC):
        _namespaces(generation)
    try:
        from nki_agent.toolchain import cost  # noqa: F401
        from nki_agent.toolchain.cost.calibration import effective_constants  # noqa: F401
    except Exception as e:  # noqa: BLE001 - no cost model: the estimate is simply absent
        import sys

        print(f"nki-agent: cost model unavailable: {type(e).__name__}: {e}", file=sys.stderr)
    if run:
        try:
            from nki_agent.toolchain.judging import warmup

            warmup.run()
        except Exception as e:  # noqa: BLE001 - a cold first call is slower, never wrong
            import sys

            print(f"nki-agent: warm-up kernel failed: {type(e).__name__}: {e}", file=sys.stderr)


def executor_role(req: dict[str, Any], next_frame: Frames,
                  emit: Emit) -> tuple[dict[str, Any], list[np.ndarray | None]]:
    """Execute the traced program on each seed's arrays; ``run`` frames as ``roles.kernel_role`` sent them.

    Frames: ``job`` (the kernel's and task's paths, the target and the kernel's text: what the request of a warm
    executor, started before its job was known, cannot carry), ``settings``, then ``program`` / ``seed`` ones.
    A warm executor (``"warm": true``) warms up before its job arrives; a cold one once the settings do."""
    from nki_agent.toolchain.judging.roles import _task_settings, launch_records, run_frames
    from nki_agent.toolchain.protocol.program import ProgramError, unpack
    from nki_agent.toolchain.sim.replay import ProgramDispatch, ProgramKernel, use_source
    from nki_agent.toolchain.judging.verify import Case, VerifyResult, run_cases
    from nki_agent.toolchain.isolation.worker import _calibration

    warm = req.get("warm") is True
    if warm:
        _warm(run=True)
    job, _ = next_frame()
    job = job if job.get("kind") == "job" else {}
    kernel_path = str(job.get("kernel_file", ""))
    target = job.get("target") if isinstance(job.get("target"), str) else None
    result = VerifyResult(kernel=kernel_path, task=str(job.get("task_file", "")), target=target or "")
    runs: dict[str, Any] = {}
    if isinstance(job.get("source"), str):
        use_source(kernel_path, job["source"])
    try:
        header, _ = next_frame()
        # a cold executor warms once the settings arrive — the reference has loaded its task, the tracer is
        # loading the kernel — while the reference draws and the kernel is traced: off the critical path, and
        # not competing with those two processes' start-up for the CPU
        if not warm:
            _warm()
        settings = _task_settings(header.get("settings") or {})
        records = launch_records(settings)
        programs: dict[Any, Any] = {}
        seed_args: dict[int, list[Any]] = {}

        def cases() -> Any:
            while True:
                frame, arrays = next_frame()
                kind = frame.get("kind")
                if kind == "program":
                    try:
                        programs[frame.get("key")] = ProgramKernel(unpack(arrays[0] if arrays else None))
                    except ProgramError as e:
                        raise NkiError("sim_sandbox_violation", f"the kernel's traced program is malformed: {e}",
                                       SourceLocation(kernel_path, 1)) from None
                    continue
                if kind != "seed":
                    return
                kernel.program = programs.get(frame.get("key"))
                if kernel.program is None:
                    raise NkiError("sim_worker_crash", "a seed arrived without its program", SourceLocation(kernel_path, 1))
                call = list(arrays)
                seed_args[int(frame["seed"])] = call[: int(frame["inputs"])]
                yield Case(int(frame["seed"]), call, float(frame.get("reference_seconds", 0.0)))

        judge = run_frames(seed_args, records, runs, emit)
        kernel = ProgramDispatch()
        result = run_cases(kernel, settings, kernel_path, cases(), judge, target,  # type: ignore[arg-type]
                           req.get("time_limit"), calibration=_calibration(req))
        result.generation = kernel.generation
    except NkiError as e:
        result.problems.append(Problem.from_error(e))
    except Exception as e:  # noqa: BLE001 - a bug of ours: report, never hang
        result.problems.append(Problem("sim_worker_crash", f"the executor failed: {type(e).__name__}: {e}",
                                       location=SourceLocation(kernel_path, 1)))
    return {"ok": True, "result": result.as_dict(), "runs": runs}, []
