"""The two worker roles of a verification; the third role, the judge, is the parent (``judge.py``).

``reference_role`` (task code only, in its own jail): load the task, and per seed of the request's
``seed_list`` (the parent's visible seeds, then the hidden ones it drew; else ``range(seeds)``) draw
the inputs, the model parameters and the reference outputs; they go back to the parent as arrays. No
kernel code is ever loaded in that process.

``kernel_role`` (kernel code only, in a jail where the task file cannot be opened): install the
audit-hook tripwire (``guard.py``: a clear message for an attempt, not the boundary), refuse kernel
source that tampers with the process (``tamper.py``), load the kernel, then wait for the parent's second frame with the settings and each seed's arguments, run
the kernel on the simulator and send back, per seed, its outputs and its arguments as they are
afterwards (the parent compares them with what it sent) and the launch's store log (which line
wrote which box of each output: the parent names the line of the first mismatch with it). The
seed numbers this role sees are the parent's labels (positions), never the hidden seeds' values. Everything this role says is untrusted:
the parent believes only the shapes and dtypes of what it returns.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nki_agent.toolchain.facts.errors import NkiError, Problem, SourceLocation

MAX_OUTPUTS = 64  # outputs per seed sent back; kernels return a handful
MAX_SCAN_BYTES = 5 << 20  # the tamper scan reads what load_module would accept
MAX_STORES = 4160  # store-log entries per seed's run frame (``sim/stores.py``: display only)
Frames = Callable[[], tuple[dict[str, Any], list[np.ndarray | None]]]
Emit = Callable[[dict[str, Any], list[np.ndarray | None]], None]


def settings_of(task: Any) -> dict[str, Any]:
    """The task's settings as plain JSON (what the kernel role and the judge need, nothing else)."""
    return {"path": task.path, "tolerance": dict(task.tolerance), "grid": list(task.grid), "lnc": task.lnc,
            "kernel_name": task.kernel_name, "target": task.target,
            "allow_input_mutation": bool(task.allow_input_mutation)}


def seed_list(req: dict[str, Any]) -> list[int]:
    """The seeds to draw, in order: the request's ``seed_list`` (the parent's visible seeds, then its hidden
    ones), else ``range(seeds)``."""
    given = req.get("seed_list")
    if isinstance(given, list) and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in given):
        return [int(s) for s in given]
    return list(range(int(req.get("seeds", 3))))


def launch_records(task: Any) -> list[Any]:
    """Every launch ``task.launcher`` makes from now on also appends its ``LaunchRecord`` to the returned list
    (``run_cases`` keeps its own records to itself; the store log of each seed's launch travels with its run)."""
    import dataclasses

    from nki_agent.toolchain.sim.kernel import DEFAULTS

    records: list[Any] = []
    plain = task.launcher

    def launcher(kernel: Any) -> Any:
        inner = plain(kernel)

        def run(*args: Any, **kwargs: Any) -> Any:
            defaults = DEFAULTS.get()
            previous = defaults.observer

            def observe(record: Any) -> None:
                records.append(record)
                if previous is not None:
                    previous(record)

            token = DEFAULTS.set(dataclasses.replace(defaults, observer=observe))
            try:
                return inner(*args, **kwargs)
            finally:
                DEFAULTS.reset(token)
        return run

    task.launcher = launcher  # the instance attribute shadows the method
    return records


def reference_role(req: dict[str, Any], emit: Emit) -> tuple[dict[str, Any], list[np.ndarray | None]]:
    """Task code only, never kernel code: a ``settings`` frame, then one ``seed`` frame per seed (its
    inputs, parameters and expected outputs) as soon as it is drawn, so the kernel can run seed k while
    the reference draws seed k + 1; the reply ends the stream."""
    from nki_agent.toolchain.tasks import load_task, search_path
    from nki_agent.toolchain.judging.trace_roles import spec_of
    from nki_agent.toolchain.judging.verify import _as_list, _to_np, draw, task_problem

    task_path = req["task"]
    try:
        task = load_task(task_path, search_path(req))
        emit({"kind": "settings", "settings": settings_of(task)}, [])
        inputs_only = bool(req.get("inputs_only"))  # a simulation: the task's inputs, no reference run
        for seed in seed_list(req):
            def shapes(ins: list[np.ndarray], params: list[np.ndarray], seed: int = seed) -> None:
                if req.get("shapes") is True and seed == seed_list(req)[0]:
                    emit({"kind": "shapes", "inputs": len(ins), "spec": spec_of(ins + params)}, [])

            if inputs_only:
                task.seed(seed)
                inputs, expected, t_ref = _as_list(task.get_inputs()), [], 0.0
            else:
                # with ``shapes``, the first seed's shapes first, so that the kernel is traced while the reference runs (``draw``'s steps)
                inputs, expected, t_ref = draw(task, seed, shapes)
            ins = [_to_np(x) for x in inputs]
            params = [_to_np(p) for p in task.model_parameters()]
            outs = [np.ascontiguousarray(e) for e in expected]
            emit({"kind": "seed", "seed": seed, "reference_seconds": t_ref, "inputs": len(ins),
                  "params": len(params), "expected": len(outs)}, [*ins, *params, *outs])
    except NkiError as e:
        return {"ok": True, "kind": "done", "problems": [Problem.from_error(e).as_dict()]}, []
    except Exception as e:  # noqa: BLE001 - the task's own code failed (inputs, reference)
        return {"ok": True, "kind": "done", "problems": [task_problem(e, task_path).as_dict()]}, []
    return {"ok": True, "kind": "done", "problems": []}, []


def kernel_role(req: dict[str, Any], next_frame: Frames,
                emit: Emit) -> tuple[dict[str, Any], list[np.ndarray | None]]:
    """Run the kernel on each seed's arguments as the parent sends them (``settings``, then ``seed``
    frames until ``end``); a ``run`` frame per seed carries its outputs and final arguments back."""
    from nki_agent.toolchain.isolation import guard
    from nki_agent.toolchain.tasks import find_kernel, load_module, search_path
    from nki_agent.toolchain.judging.verify import Case, VerifyResult, run_cases, select_params

    kernel_path = req["kernel"]
    result = VerifyResult(kernel=kernel_path, task=req.get("task", ""), target=req.get("target") or "")
    runs: dict[str, Any] = {}
    _preload(kernel_path, search_path(req))
    guard.install(req.get("scratch_dir") or "/job/out", [])
    before = _fingerprint()
    try:
        _refuse_tampering(kernel_path)
        module = load_module(kernel_path, "nki_agent_kernel", search_path(req))
        header, _ = next_frame()
        settings = _task_settings(header.get("settings") or {})
        records = launch_records(settings)
        kernel = find_kernel(module, req.get("kernel_name") or settings.kernel_name)
        seed_args: dict[int, list[Any]] = {}

        def cases() -> Any:
            while True:
                sd, args = next_frame()
                if sd.get("kind") != "seed":
                    return
                n_in, n_par = int(sd["inputs"]), int(sd["params"])
                call = list(args[:n_in]) + select_params(kernel, list(args[n_in:n_in + n_par]), n_in)
                seed_args[int(sd["seed"])] = call
                yield Case(int(sd["seed"]), call, float(sd.get("reference_seconds", 0.0)))

        judge = run_frames(seed_args, records, runs, emit)
        with _tensor_outputs_only(kernel_path):
            from nki_agent.toolchain.isolation.worker import _calibration

            result = run_cases(kernel, settings, kernel_path, cases(), judge, req.get("target"),
                               req.get("time_limit"), calibration=_calibration(req))
        changed = _changed(before)
        if changed:
            result.problems.append(Problem("sim_sandbox_violation", "the kernel changed the simulator or NumPy it "
                                           f"runs on ({', '.join(changed[:4])}): its results cannot be trusted",
                                           location=SourceLocation(kernel_path, 1)))
    except NkiError as e:
        result.problems.append(Problem.from_error(e))
    except Exception as e:  # noqa: BLE001 - a bug of ours, or kernel code that broke the toolchain
        result.problems.append(Problem("sim_python_exception", f"{type(e).__name__}: {e}",
                                       location=SourceLocation(kernel_path, 1)))
    _mark_violations(result, kernel_path)
    return {"ok": True, "result": result.as_dict(), "runs": runs}, []


def run_frames(seed_args: dict[int, list[Any]], records: list[Any], runs: dict[str, Any],
               emit: Emit) -> Callable[[int, list[Any], Any, list[str]], Any]:
    """``run_cases``' judge in a worker: it judges nothing, it sends the seed's ``run`` frame — the outputs,
    the arguments as they are afterwards and the launch's store log — for the parent to judge."""
    from nki_agent.toolchain.judging.verify import SeedResult

    def judge(seed: int, got: list[Any], expected: Any, mutated: list[str]) -> SeedResult:
        outs = [g if isinstance(g, np.ndarray) else None for g in got[:MAX_OUTPUTS]]
        after = [a if isinstance(a, np.ndarray) else None for a in seed_args.get(seed, [])]
        meta = {"outputs": len(outs), "arguments": len(after), "mutated": mutated,
                "kinds": [type(g).__name__ for g in got[:MAX_OUTPUTS]]}
        runs[str(seed)] = meta
        stores = records[-1].stores[:MAX_STORES] if records else []
        records.clear()
        emit({"kind": "run", "seed": seed, **meta, "stores": stores}, outs + after)
        return SeedResult(seed=seed, correct=True)

    return judge


def _watched() -> dict[str, Any]:
    """NumPy and the toolchain's own modules: what the simulator computes with."""
    return {name: mod for name, mod in list(sys.modules.items())
            if mod is not None and (name == "numpy" or name.startswith(("numpy._core", "nki_agent.toolchain")))}


def _fingerprint() -> dict[tuple[str, str, str], int]:
    """Identity of every module global of ``_watched`` and of every item of their dict globals (op tables)."""
    out: dict[tuple[str, str, str], int] = {}
    for name, mod in _watched().items():
        try:
            items = list(vars(mod).items())
        except TypeError:
            continue
        for key, value in items:
            out[(name, str(key), "")] = id(value)
            if type(value) is dict and len(value) < 10_000:
                for k, v in list(value.items()):
                    out[(name, str(key), str(k))] = id(v)
    return out


def _changed(before: dict[tuple[str, str, str], int]) -> list[str]:
    """What of ``before`` was rebound or removed (new entries, such as a cache filling up, are fine)."""
    after = _fingerprint()
    out = []
    for (module, name, key), ident in before.items():
        if after.get((module, name, key)) != ident:
            out.append(f"{module}.{name}[{key!r}]" if key else f"{module}.{name}")
    return out


def _refuse_tampering(kernel_path: str) -> None:
    """Kernel source that rebinds modules, walks sys.modules or reads code/globals is not loaded."""
    from nki_agent.toolchain.isolation.tamper import findings

    try:
        with open(kernel_path, encoding="utf-8", errors="replace") as f:
            found = findings(f.read(MAX_SCAN_BYTES))
    except OSError:
        return  # loading reports the file problem
    if found:
        first = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise NkiError("sim_sandbox_violation", f"the kernel {first.what}{more}: kernel code computes with nl.* / "
                       "nisa.* and may not change or inspect the Python process it runs in",
                       SourceLocation(kernel_path, first.line, first.column))


def preload_simulator(text: str | None = None) -> None:
    """Import the simulator, the shim and NumPy's lazily loaded submodules before the tripwire is armed: ``tasks``
    imports the simulator only where it runs (the reference role never does), NumPy loads ``numpy.random`` & co.
    on first use, and those imports read frames, which the armed guard refuses.

    ``text``: the source the process will load (``kernel_sources``); the submodules the simulator never uses
    (``numpy.testing`` alone is 30 ms of a tracer's start) are imported only where it names them."""
    import importlib
    import re

    from nki_agent.toolchain import shim  # noqa: F401
    from nki_agent.toolchain.sim import kernel  # noqa: F401

    for name in _LAZY_NUMPY:  # NumPy imports these on first use (nisa.dropout's np.random, a kernel's np.linalg)
        word = name.rsplit(".", 1)[-1]
        if name in _USER_ONLY_NUMPY and text is not None and not re.search(rf"\b{word}\b", text):
            continue
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - not in this NumPy: the kernel's own use will say so
            pass


def kernel_sources(kernel_path: str, search_path: Sequence[str] = ()) -> str:
    """The text of the kernel file and of the user's modules it imports (``jail_imports.closure``: what its jail
    binds), each capped at 1 MiB: what a preload looks for names in."""
    import os

    from nki_agent.toolchain.isolation.jail_imports import closure

    texts = []
    for path in closure(kernel_path, [os.path.dirname(os.path.abspath(kernel_path)), *search_path]):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                texts.append(f.read(1 << 20))
        except OSError:
            continue
    return "\n".join(texts)


_LAZY_NUMPY = ("numpy.random", "numpy.linalg", "numpy.fft", "numpy.polynomial", "numpy.ma", "numpy.testing",
               "numpy.lib.stride_tricks")
_USER_ONLY_NUMPY = frozenset({"numpy.fft", "numpy.polynomial", "numpy.ma", "numpy.testing"})  # the simulator uses none


def _preload(kernel_path: str, search_path: Sequence[str] = ()) -> None:
    """Import what a kernel file may import that loads native code (the tripwire refuses ctypes later), the
    simulator and the cost model."""
    text = kernel_sources(kernel_path, search_path)
    preload_simulator(text)
    if "torch" in text:
        try:
            import torch  # noqa: F401
        except Exception:  # noqa: BLE001 - not installed: the kernel's own import will say so
            pass
    try:  # the cost model estimates the first launch; its result models are pydantic classes, whose
        from nki_agent.toolchain import cost  # noqa: F401  # creation reads frames (sys._getframe), refused once guarded
    except Exception:  # noqa: BLE001 - no cost model: the estimate is simply absent
        pass
    gc.collect()


def _task_settings(src: dict[str, Any]) -> Any:
    """A Task carrying only settings (launcher, tolerance, mutation policy): no module, no reference."""
    import types

    from nki_agent.toolchain.tasks import Task

    return Task(path=str(src.get("path", "")), module=types.ModuleType("nki_agent_task_settings"),
                get_inputs=list, reference=None, model_class=None, get_init_inputs=None,
                tolerance={str(k): float(v) for k, v in dict(src.get("tolerance") or {}).items()},
                grid=tuple(int(g) for g in (src.get("grid") or ())), kernel_name=src.get("kernel_name"),
                allow_input_mutation=bool(src.get("allow_input_mutation", False)), target=src.get("target"),
                lnc=int(src["lnc"]) if src.get("lnc") else None)


class _tensor_outputs_only:
    """Refuse kernel outputs that are not simulator tensors (an answer computed in NumPy, outside NKI)."""

    def __init__(self, kernel_path: str) -> None:
        self.kernel_path = kernel_path

    def __enter__(self) -> None:
        from nki_agent.toolchain.location import caller_location
        from nki_agent.toolchain.sim import kernel as simkernel
        from nki_agent.toolchain.sim.tensor import Tensor

        self.original = original = simkernel._to_numpy
        path = self.kernel_path

        def checked(x: Any) -> Any:
            if x is not None and not isinstance(x, (Tensor, tuple, list, dict)):
                raise NkiError("sim_sandbox_violation",
                               f"the kernel returned a {type(x).__module__}.{type(x).__name__}, not an NKI tensor: "
                               "outputs must be NKI tensors the kernel wrote (e.g. nl.ndarray(..., "
                               "buffer=nl.shared_hbm) filled with nl.store / nisa.dma_copy)",
                               caller_location() or SourceLocation(path, 1))
            return original(x)

        simkernel._to_numpy = checked  # type: ignore[assignment]

    def __exit__(self, *exc: object) -> None:
        from nki_agent.toolchain.sim import kernel as simkernel

        simkernel._to_numpy = self.original  # type: ignore[assignment]


def _mark_violations(result: Any, kernel_path: str) -> None:
    """Refused operations become ``sim_sandbox_violation`` problems, even when the kernel caught them."""
    from nki_agent.toolchain.isolation import guard

    found = False
    for i, p in enumerate(result.problems):
        if p.code == "sim_python_exception" and "SandboxViolation" in p.message:
            result.problems[i] = Problem("sim_sandbox_violation", p.message, p.severity, p.location, p.related)
        found = found or result.problems[i].code == "sim_sandbox_violation"
    seen = guard.violations()
    if seen and not found:
        result.problems.append(Problem("sim_sandbox_violation", "the sandbox refused " + "; ".join(seen[:5]),
                                       location=SourceLocation(kernel_path, 1)))
    if seen or found:
        result.correct = False
