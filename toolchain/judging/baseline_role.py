"""The baseline role: the task's own reference, timed — what a kernel's speedup is measured against.

Task code only (like the reference role, in its own jail; on the neuron backend with its slot's device
and ``NEURON_RT_VISIBLE_CORES``): load the task, draw seed 0's inputs, then time the reference.
Where it runs is always labelled: ``torch-neuronx`` — a ``class Model`` task with torch-neuronx and
torch_xla importable: the model compiled with ``torch.compile(backend="openxla")`` on
``xm.xla_device()``, each iteration closed by ``xm.mark_step()`` + ``xm.wait_device_ops()`` — else
``cpu`` (a NumPy ``reference(*inputs)``, or no torch-neuronx), with the reason. Warmup, then timed
windows as ``runner.latency.run_loop`` decides; the reply carries the raw per-iteration
microseconds (inputs are copied outside the timed region), the parent computes the statistics.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from nki_agent.toolchain.facts.errors import NkiError, Problem

TORCH_NEURONX, CPU = "torch-neuronx", "cpu"


def baseline_role(req: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    from ...runner.latency import LoopPolicy, run_loop
    from nki_agent.toolchain.tasks import load_task, search_path
    from nki_agent.toolchain.judging.verify import draw, task_problem

    task_path = req["task"]
    policy = LoopPolicy.from_json(req.get("policy"))
    try:
        task = load_task(task_path, search_path(req))
        inputs, _, _ = draw(task, int(req.get("seed", 0)))
        once, label, reason = _on_device(task, inputs)
        if once is None:
            once = _on_cpu(task, inputs)
        samples, stop = run_loop(policy, lambda n: [once() for _ in range(n)], lambda n: [once() for _ in range(n)])
    except NkiError as e:
        return {"ok": True, "problems": [Problem.from_error(e).as_dict()]}, []
    except Exception as e:  # noqa: BLE001 - the task's own code failed
        return {"ok": True, "problems": [task_problem(e, task_path).as_dict()]}, []
    return {"ok": True, "problems": [], "label": label, "samples_us": samples, "warmup": policy.warmup,
            "stop": stop, "reason": reason}, []


def _timed(run: Callable[[], Any], prepare: Callable[[], Any] | None = None) -> Callable[[], float]:
    """One iteration's latency in µs (``prepare`` runs first, outside the timed region)."""

    def once() -> float:
        args = prepare() if prepare is not None else ()
        t0 = time.perf_counter()
        run(*args)
        return (time.perf_counter() - t0) * 1e6

    return once


def _on_device(task: Any, inputs: list[Any]) -> tuple[Callable[[], float] | None, str, str]:
    """The reference on the NeuronCore through torch-neuronx, when it can run there; else why not."""
    if task.reference is not None:
        return None, CPU, "the task's reference is NumPy code (reference(*inputs)): it runs on the CPU"
    try:
        torch = importlib.import_module("torch")
        importlib.import_module("torch_neuronx")
        xm = importlib.import_module("torch_xla.core.xla_model")
    except ImportError as e:
        return None, CPU, f"torch-neuronx is not installed on this runner ({e}): the reference runs on the CPU"
    try:
        from nki_agent.toolchain.judging.verify import _np_to_torch

        device = xm.xla_device()
        model = task.make_reference().to(device)
        args = [(x if isinstance(x, torch.Tensor) else _np_to_torch(np.asarray(x))).to(device) for x in inputs]
        compiled = torch.compile(model, backend="openxla")

        def run() -> None:
            with torch.no_grad():
                compiled(*args)
            xm.mark_step()
            xm.wait_device_ops()

        run()  # compiles (the loop's warmup follows)
    except Exception as e:  # noqa: BLE001 - torch-neuronx could not run it: the CPU still gives a baseline
        return None, CPU, f"torch-neuronx could not run the reference ({type(e).__name__}: {e}): it runs on the CPU"
    return _timed(run), TORCH_NEURONX, ""


def _on_cpu(task: Any, inputs: list[Any]) -> Callable[[], float]:
    from nki_agent.toolchain.judging.verify import _np_to_torch, _to_np

    ref = task.make_reference()
    if task.reference is not None:
        arrays = [_to_np(x) for x in inputs]
        return _timed(ref, lambda: [np.array(a, copy=True) for a in arrays])
    import torch

    targs = [x if isinstance(x, torch.Tensor) else _np_to_torch(np.asarray(x)) for x in inputs]

    def run() -> None:
        with torch.no_grad():
            ref(*targs)

    return _timed(run)
