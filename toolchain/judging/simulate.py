"""One simulated run of a kernel on a task's inputs (no reference check): outputs, trace and problems."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, Callable

import numpy as np

from nki_agent.toolchain.facts import dtypes
from nki_agent.toolchain.facts.errors import NkiError, Problem
from nki_agent.toolchain.sim.kernel import DEFAULTS, LaunchDefaults, LaunchRecord
from nki_agent.toolchain.tasks import find_kernel, load_module, load_task
from nki_agent.toolchain.judging.verify import _as_list, _extra_args, _to_np


def _summary(a: np.ndarray) -> dict[str, Any]:
    f = a.astype(np.float64) if a.size else a
    finite = np.isfinite(f) if a.size else f
    return {"shape": list(a.shape), "dtype": dtypes.name(a.dtype),
            "min": float(f[finite].min()) if a.size and finite.any() else None,
            "max": float(f[finite].max()) if a.size and finite.any() else None,
            "nan": int(np.isnan(f).sum()) if a.size else 0}


def simulate_files(kernel_path: str, task_path: str, target: str | None = None, kernel_name: str | None = None,
                   seed: int = 0, time_limit: float | None = None, search_path: Sequence[str] = (),
                   estimate: bool = False, arithmetic: bool = True, timeline: bool = False,
                   on_record: Callable[[LaunchRecord], None] | None = None,
                   sensitivities: bool = False, calibration: dict[str, dict[str, float]] | None = None
                   ) -> dict[str, Any]:
    """Run the kernel once on the task's inputs for ``seed``; never raises for user-code problems.

    ``search_path``: folders both files may import from after their own (``tasks.load_module``).
    ``estimate``: trace the launch and add the cost model's estimate (``out["estimate"]``, JSON of
    ``CostEstimate``; ``timeline`` includes the engine timeline, ``sensitivities`` the latency's sensitivity to
    each free constant, for calibration); ``arithmetic=False`` skips computing
    values where that is expensive (a trace-only run: outputs are meaningless). ``on_record`` sees the
    last launch's record (its ``instruction_trace`` when estimating). ``calibration``: the user's
    calibrated constants per target (``cost.calibration.effective_constants``)."""
    out: dict[str, Any] = {"kernel": kernel_path, "task": task_path, "ran": False, "problems": [], "outputs": []}
    records: list[LaunchRecord] = []
    try:
        task = load_task(task_path, search_path)
        kernel = find_kernel(load_module(kernel_path, "nki_agent_kernel", search_path),
                             kernel_name or task.kernel_name)
        target = target or task.target
        task.seed(seed)
        inputs = _as_list(task.get_inputs())
        out["inputs"] = [{"shape": list(np.shape(x)), "dtype": dtypes.name(_to_np(x).dtype)} for x in inputs]
        out["kernel_name"] = getattr(kernel, "__name__", "")
        if task.reference is None:
            task.make_reference()
        args = [_to_np(x) for x in inputs] + _extra_args(kernel, task, len(inputs))
        token = DEFAULTS.set(LaunchDefaults(target=target, time_limit=time_limit, observer=records.append,
                                            trace=estimate, arithmetic=arithmetic))
        try:
            t0 = time.perf_counter()
            result = task.launcher(kernel)(*args)
            out["seconds"] = time.perf_counter() - t0
        finally:
            DEFAULTS.reset(token)
        out["ran"] = True
        out["outputs"] = [_summary(_to_np(r)) for r in _as_list(result) if r is not None]
    except NkiError as e:
        out["problems"].append(Problem.from_error(e).as_dict())
    except Exception as e:
        from nki_agent.toolchain.location import traceback_location

        loc = traceback_location(e.__traceback__)
        out["problems"].append(Problem("sim_task_error", f"{type(e).__name__} in task code: {e}", location=loc).as_dict())
    if records:
        rec = records[-1]
        out["problems"].extend(Problem.from_error(w).as_dict() for w in rec.warnings)
        out.update({"target": rec.target, "generation": rec.generation, "grid": list(rec.grid),
                    "peak_sbuf_bytes": rec.peak_sbuf_bytes, "peak_psum_bytes": rec.peak_psum_bytes,
                    "instructions": rec.instructions, "trace": [asdict(t) for t in rec.trace[:2000]]})
        if estimate and rec.instruction_trace is not None and out["ran"]:
            out["estimate"] = estimate_json(rec, timeline, sensitivities, calibration)
        if on_record is not None:
            on_record(rec)
    return out


def estimate_json(rec: LaunchRecord, timeline: bool = False, sensitivities: bool = False,
                  calibration: dict[str, dict[str, float]] | None = None) -> dict[str, Any] | None:
    """The cost model's estimate of a traced launch as JSON (None, with the reason logged, if it fails),
    with the constants in effect for its target (the user's calibration, else the packaged one, else the
    documented defaults: ``cost.calibration.effective_constants``)."""
    assert rec.instruction_trace is not None
    try:
        from nki_agent.toolchain.cost import estimate_data
        from nki_agent.toolchain.cost.calibration import effective_constants

        return estimate_data(rec.instruction_trace, rec.target, constants=effective_constants(rec.target, calibration),
                             peak_sbuf_bytes=rec.peak_sbuf_bytes, timeline=timeline, sensitivities=sensitivities)
    except Exception as e:  # noqa: BLE001 - an estimate is extra information; never lose the simulation for it
        import sys

        print(f"nki-agent: cost model failed: {type(e).__name__}: {e}", file=sys.stderr)
        return None
