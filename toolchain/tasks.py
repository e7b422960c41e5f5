"""Kernel tasks (NKIGen-Bench / KernelBench form) and kernel files, loaded with the simulator's imports.

A task module defines ``get_inputs()``, optional ``get_init_inputs()``, and a reference: either
``reference(*inputs)`` (NumPy) or ``class Model(torch.nn.Module)``; optionally ``TOLERANCE``, ``GRID``
(SPMD grid of classic kernels), ``LNC`` (``kernel[lnc]`` degree of new-API kernels), ``KERNEL`` (kernel
function name), ``TARGET`` and ``ALLOW_INPUT_MUTATION``. Loading executes user code, so callers
that do not trust it run this inside the sandboxed worker.

A loaded file sees its own folder first on ``sys.path``, then the folders of ``search_path`` (the fix
agent's candidates run from a temp copy and pass the user's kernel folder there, so sibling helper
modules import while the copy still shadows the user's file of the same name). Modules imported
from a ``search_path`` folder are read, never compiled to ``__pycache__`` there.
"""

from __future__ import annotations

import importlib.util
import os
import random
import re
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from nki_agent.toolchain.facts.errors import NkiError, SourceLocation
from .location import traceback_location

if TYPE_CHECKING:
    from .sim.kernel import Kernel

MAX_SOURCE_BYTES = 5 * 1024 * 1024  # kernels are hundreds of lines; 5 MiB is far beyond any real one


@dataclass
class Task:
    """A loaded task module with its reference and settings."""

    path: str
    module: types.ModuleType
    get_inputs: Callable[[], Any]
    reference: Callable[..., Any] | None
    model_class: Any
    get_init_inputs: Callable[[], Any] | None
    tolerance: dict[str, float] = field(default_factory=dict)
    grid: tuple[int, ...] = ()
    kernel_name: str | None = None
    allow_input_mutation: bool = False
    target: str | None = None
    lnc: int | None = None

    def launcher(self, kernel: Kernel) -> Any:
        """``GRID`` launches classic kernels (SPMD grid); ``LNC`` launches new-API kernels (kernel[lnc])."""
        from .sim import runtime

        if kernel.generation == runtime.CLASSIC and self.grid:
            return kernel[self.grid]
        if kernel.generation == runtime.NEW and self.lnc:
            return kernel[self.lnc]
        return kernel

    def seed(self, seed: int) -> None:
        """Seed every RNG a task may use before drawing inputs."""
        np.random.seed(seed)
        random.seed(seed)
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.manual_seed(seed)

    def make_reference(self) -> Callable[..., Any]:
        if self.reference is not None:
            return self.reference
        init = list(self.get_init_inputs()) if self.get_init_inputs else []
        model = self.model_class(*init)
        if hasattr(model, "eval"):
            model.eval()
        self._model = model
        return model  # type: ignore[no-any-return]

    def model_parameters(self) -> list[Any]:
        model = getattr(self, "_model", None)
        if model is None or not hasattr(model, "parameters"):
            return []
        return [p.detach() for p in model.parameters()]


def _read_source(path: str) -> str:
    if not os.path.isfile(path):
        raise NkiError("sim_bad_input", f"no such file: {path}", None)
    size = os.path.getsize(path)
    if size > MAX_SOURCE_BYTES:
        raise NkiError("sim_bad_input", f"{path} is {size} bytes; kernel and task files are limited to "
                       f"{MAX_SOURCE_BYTES} bytes", SourceLocation(path, 1))
    with open(path, "rb") as f:
        raw = f.read()
    if b"\x00" in raw:
        raise NkiError("sim_bad_input", f"{path} is a binary file, not Python source", SourceLocation(path, 1))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise NkiError("sim_bad_input", f"{path} is not UTF-8 text: {e}", SourceLocation(path, 1)) from None


def search_dirs(path: str, search_path: Sequence[str] = ()) -> list[str]:
    """The folders a loaded file imports from, in order: its own folder, then ``search_path`` (absolute,
    existing folders only, duplicates dropped)."""
    dirs = [os.path.dirname(os.path.abspath(path))]
    for p in search_path:
        d = os.path.abspath(p) if isinstance(p, str) and p else ""
        if d and d not in dirs and os.path.isdir(d):
            dirs.append(d)
    return dirs


def strings(raw: Any) -> list[str]:
    """The non-empty strings of a JSON list (anything else in a worker request is ignored)."""
    return [p for p in raw if isinstance(p, str) and p] if isinstance(raw, list) else []


def search_path(request: dict[str, Any]) -> list[str]:
    """The ``search_path`` of a worker request (``api`` and ``confined`` put it there)."""
    return strings(request.get("search_path"))


def _put_on_path(dirs: list[str]) -> None:
    """Put ``dirs`` on ``sys.path``: alone, the file's folder is added if missing (as before); with
    extra folders all of them move to the front in this order, so the file's folder shadows them."""
    if len(dirs) == 1:
        if dirs[0] not in sys.path:
            sys.path.insert(0, dirs[0])
        return
    for d in reversed(dirs):
        while d in sys.path:
            sys.path.remove(d)
        sys.path.insert(0, d)


def load_module(path: str, name: str, search_path: Sequence[str] = ()) -> types.ModuleType:
    """Execute a user file as a module with NKI imports bound to the simulator.

    Its imports resolve from its own folder first, then from ``search_path`` (``search_dirs``)."""
    source = _read_source(path)
    try:
        code = compile(source, path, "exec")
    except SyntaxError as e:
        loc = SourceLocation(path, e.lineno or 1, (e.offset or 1), e.end_lineno, e.end_offset)
        raise NkiError("sim_syntax_error", f"SyntaxError: {e.msg}", loc) from None
    except (ValueError, RecursionError, MemoryError) as e:
        raise NkiError("sim_bad_input", f"{path} cannot be compiled: {type(e).__name__}: {e}", SourceLocation(path, 1)) from None
    spec = importlib.util.spec_from_loader(name, loader=None, origin=path)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = path
    if search_path:
        sys.dont_write_bytecode = True  # the user's folders are read, never written (no __pycache__ there)
    _put_on_path(search_dirs(path, search_path))
    sys.modules[name] = module
    try:
        if _SHIM_NAMES.search(source):
            _exec_shimmed(code, module)
        else:  # a task that never names NKI (most do not) runs without building the simulator's modules
            try:
                exec(code, module.__dict__)
            except ModuleNotFoundError as e:  # ... unless a module it imports does
                if not (e.name or "").split(".")[0] in ("neuronxcc", "nki", "torch_xla"):
                    raise
                module.__dict__.clear()
                module.__file__ = path
                _exec_shimmed(code, module)
    except NkiError:
        raise
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        raise NkiError("sim_python_exception", f"{type(e).__name__} while importing {os.path.basename(path)}: {e}",
                       traceback_location(e.__traceback__) or SourceLocation(path, 1)) from e
    return module


# a file that may import NKI (or what the shim stands in for): it is executed with the simulator's modules bound
_SHIM_NAMES = re.compile(r"\b(?:nki|neuronxcc|torch_xla)\b")


def _exec_shimmed(code: Any, module: types.ModuleType) -> None:
    from .shim import installed

    with installed():
        exec(code, module.__dict__)


def find_kernel(module: types.ModuleType, name: str | None = None) -> Kernel:
    """The kernel to run: ``name`` if given, else the only ``@nki.jit`` function of the module."""
    from .sim.kernel import HostWrapper, Kernel, launches_a_kernel

    path = getattr(module, "__file__", "?")
    if name:
        obj = getattr(module, name, None)
        if obj is None:
            raise NkiError("sim_no_kernel", f"{os.path.basename(path)} has no function named '{name}'",
                           SourceLocation(path, 1))
        if isinstance(obj, Kernel):
            return obj
        if callable(obj):
            from .sim import runtime

            gen = runtime.NEW if "import nki" in open(path, encoding="utf-8", errors="replace").read() else runtime.CLASSIC
            return HostWrapper(obj, gen) if launches_a_kernel(obj, vars(module)) else Kernel(obj, gen)
        raise NkiError("sim_no_kernel", f"'{name}' in {os.path.basename(path)} is not a function", SourceLocation(path, 1))
    kernels = [v for v in vars(module).values() if isinstance(v, Kernel) and _defined_in(v, path)]
    if not kernels:
        raise NkiError("sim_no_kernel", f"{os.path.basename(path)} defines no function decorated with @nki.jit",
                       SourceLocation(path, 1))
    if len(kernels) > 1:
        names = ", ".join(k.__name__ for k in kernels)
        raise NkiError("sim_no_kernel", f"{os.path.basename(path)} defines several kernels ({names}); name one with "
                       "--kernel or KERNEL = '...' in the task", SourceLocation(path, 1))
    return kernels[0]


def _defined_in(k: Kernel, path: str) -> bool:
    code = getattr(k.func, "__code__", None)
    return code is None or os.path.abspath(code.co_filename) == os.path.abspath(path)


def load_task(path: str, search_path: Sequence[str] = ()) -> Task:
    module = load_module(path, "nki_agent_task", search_path)
    get_inputs = getattr(module, "get_inputs", None)
    reference = getattr(module, "reference", None)
    model_class = getattr(module, "Model", None)
    loc = SourceLocation(path, 1)
    if not callable(get_inputs):
        raise NkiError("sim_task_error", "task defines no get_inputs() function", loc)
    if not callable(reference) and model_class is None:
        raise NkiError("sim_task_error", "task defines neither reference(*inputs) nor class Model", loc)
    tol = getattr(module, "TOLERANCE", None) or {}
    if not isinstance(tol, dict) or not set(tol) <= {"atol", "rtol"}:
        raise NkiError("sim_task_error", "TOLERANCE must be a dict with keys 'atol' and/or 'rtol'", loc)
    grid = getattr(module, "GRID", ()) or ()
    grid = tuple(int(g) for g in (grid if isinstance(grid, (tuple, list)) else (grid,)))
    return Task(path=path, module=module, get_inputs=get_inputs, reference=reference if callable(reference) else None,
                model_class=model_class, get_init_inputs=getattr(module, "get_init_inputs", None),
                tolerance={k: float(v) for k, v in tol.items()}, grid=grid,
                kernel_name=getattr(module, "KERNEL", None),
                allow_input_mutation=bool(getattr(module, "ALLOW_INPUT_MUTATION", False)),
                target=getattr(module, "TARGET", None),
                lnc=int(getattr(module, "LNC")) if getattr(module, "LNC", None) else None)


def describe_task(path: str, search_path: Sequence[str] = ()) -> dict[str, Any]:
    """Shapes and dtypes of the task's inputs (seed 0) and its settings; problems instead of raising."""
    from nki_agent.toolchain.facts import dtypes
    from .sim.kernel import to_numpy_input

    out: dict[str, Any] = {"task": path, "inputs": [], "problems": []}
    try:
        task = load_task(path, search_path)
        task.seed(0)
        raw = task.get_inputs()
        inputs = list(raw) if isinstance(raw, (list, tuple)) else [raw]
    except NkiError as e:
        from nki_agent.toolchain.facts.errors import Problem

        out["problems"].append(Problem.from_error(e).as_dict())
        return out
    except Exception as e:  # the task's own code failed
        from nki_agent.toolchain.facts.errors import Problem

        loc = traceback_location(e.__traceback__) or SourceLocation(path, 1)
        out["problems"].append(Problem("sim_task_error", f"{type(e).__name__} in task code: {e}", location=loc).as_dict())
        return out
    for x in inputs:
        arr = to_numpy_input(x)
        if arr is None:
            out["inputs"].append({"shape": None, "dtype": type(x).__name__, "value": repr(x)[:80]})
        else:
            out["inputs"].append({"shape": [int(d) for d in arr.shape], "dtype": dtypes.name(arr.dtype)})
    out.update(kernel_name=task.kernel_name, grid=list(task.grid), lnc=task.lnc, target=task.target,
               tolerance=task.tolerance, reference="Model" if task.reference is None else "reference",
               allow_input_mutation=task.allow_input_mutation)
    return out
