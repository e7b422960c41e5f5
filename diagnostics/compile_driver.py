"""Subprocess entry of the real-compiler path: run a kernel through the installed Neuron SDK, print its errors.

``python -m nki_agent.diagnostics.compile_driver '<json request>'`` loads the kernel and task files
with plain imports (the real ``neuronxcc.nki`` / ``nki`` packages, never our simulator), draws the
task's inputs and calls the SDK entry point for the requested mode. Failures print a normal
traceback (without this driver's own frames) and exit 1; success prints ``NKI_AGENT_COMPILE_OK``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import sys
import traceback
import types
from typing import Any

OK_MARKER = "NKI_AGENT_COMPILE_OK"


def _load(path: str, name: str) -> types.ModuleType:
    directory = os.path.dirname(os.path.abspath(path))
    if directory not in sys.path:
        sys.path.insert(0, directory)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _numpy(x: Any) -> Any:
    if hasattr(x, "detach") and hasattr(x, "numpy"):
        return x.detach().cpu().numpy()
    return x


def _run(req: dict[str, Any]) -> Any:
    kernel_mod = _load(req["kernel"], "nki_agent_user_kernel")
    task_mod = _load(req["task"], "nki_agent_user_task")
    name = req.get("kernel_name") or getattr(task_mod, "KERNEL", None) or req.get("default_kernel")
    kernel = getattr(kernel_mod, str(name))
    seed = int(req.get("seed", 0))
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass
    inputs = list(task_mod.get_inputs())
    grid = getattr(task_mod, "GRID", None)
    launch = kernel[tuple(grid) if isinstance(grid, (list, tuple)) else grid] if grid else kernel
    mode, generation = req.get("mode", "simulate"), req["generation"]
    if generation == "classic":
        from neuronxcc import nki  # type: ignore[import-not-found]

        args = [_numpy(x) for x in inputs]
        if mode == "baremetal":
            return nki.baremetal(launch)(*args)
        return nki.simulate_kernel(launch, *args)
    import nki as new_nki  # type: ignore[import-not-found]

    if mode == "jit":
        return launch(*inputs)
    return new_nki.simulate(launch)(*[_numpy(x) for x in inputs])


def main(argv: list[str]) -> int:
    req = json.loads(argv[1])
    try:
        _run(req)
    except BaseException as e:  # report every failure of user or SDK code as a traceback
        if isinstance(e, SystemExit) and not e.code:
            print(OK_MARKER, flush=True)
            return 0
        te = traceback.TracebackException.from_exception(e)
        te.stack = traceback.StackSummary.from_list([f for f in te.stack if f.filename != __file__])
        sys.stderr.write("".join(te.format()))
        sys.stderr.flush()
        return 1
    print(OK_MARKER, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
