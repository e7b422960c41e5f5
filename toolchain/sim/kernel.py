"""Kernel objects and launches: ``@nki.jit``, ``kernel[grid](...)``, inputs in, outputs out.

A launch converts NumPy (or torch) arguments into HBM tensors, runs every SPMD instance serially in
one ``Simulation`` (so ``shared_hbm`` outputs are shared as on hardware), checks that returned
outputs were written, and converts results back to NumPy in their real dtypes. Python exceptions
raised by kernel code become ``sim_python_exception`` errors at the deepest kernel frame.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from nki_agent.toolchain.facts import dtypes
from nki_agent.toolchain.facts.errors import NkiError, Related, SourceLocation
from ..location import caller_location, traceback_location
from nki_agent.toolchain.facts.targets import GENERATION_DEFAULT, Target, environment_target, resolve_target
from . import runtime
from .buffers import Buffer
from .compile_checks import returns_outputs
from .trace import DEFAULT_LIMIT, Trace, Tracer
from .tensor import (HOST_ACCESS, Tensor, TensorAttributeError, called_function, host_access_error, host_copy,
                     storage_of, view_of, wrap_array)


@dataclass
class LaunchDefaults:
    """Settings a tool (verify, the CLI, the server) imposes on every launch in its context."""

    target: str | None = None  # overrides the kernel's platform_target and the environment
    time_limit: float | None = None  # seconds of simulated execution per launch
    observer: Callable[["LaunchRecord"], None] | None = None
    trace: bool = False  # record the instruction trace (``trace.py``) for the cost model
    arithmetic: bool = True  # False: a trace-only run (values are not computed where that is expensive)
    trace_limit: int = DEFAULT_LIMIT
    recorder: Any = None  # a ``record.Recorder``: the launch is traced into a program (placeholder inputs)


@dataclass
class LaunchRecord:
    """What one launch observed: outputs, trace, memory peaks, instruction count."""

    kernel: str
    target: str
    generation: str
    grid: tuple[int, ...]
    outputs: Any = None
    trace: list[runtime.TraceEntry] = field(default_factory=list)
    peak_sbuf_bytes: int = 0
    peak_psum_bytes: int = 0
    instructions: int = 0
    warnings: list[Any] = field(default_factory=list)
    mutated_inputs: list[str] = field(default_factory=list)
    # [output index, line (0: unknown), [[lo, hi), ...]] per store into a returned output (``stores.py``)
    stores: list[list[Any]] = field(default_factory=list)
    instruction_trace: Trace | None = None  # when LaunchDefaults.trace asked for it


# NumPy's message for a ufunc called on an operand with ``__array_ufunc__ = None``
_UFUNC_REFUSED = "does not support ufuncs (__array_ufunc__=None)"

DEFAULTS: contextvars.ContextVar[LaunchDefaults] = contextvars.ContextVar("nki_launch", default=LaunchDefaults())

_DEFAULT_TARGET = GENERATION_DEFAULT  # the generation's default target (toolchain.targets.resolve_target)


class MutableTensorMarker:
    """Annotation object for ``nt.mutable_tensor`` (a parameter the kernel may write)."""

    def __getitem__(self, item: Any) -> "MutableTensorMarker":
        return self


mutable_tensor = MutableTensorMarker()


class Kernel:
    """A function decorated with ``nki.jit`` (or wrapped by baremetal/simulate)."""

    def __init__(self, func: Callable[..., Any], generation: str, **options: Any) -> None:
        self.func = func
        self.generation = generation
        self.options = options
        self.__name__ = getattr(func, "__name__", "kernel")
        self.__doc__ = getattr(func, "__doc__", None)
        self.original = func  # not __wrapped__: pytest would collect kernels named test_* as tests
        try:  # inspect.signature(kernel) is the function's (nki-library's test framework binds arguments by it)
            self.__signature__ = inspect.signature(func)
        except (TypeError, ValueError):
            pass

    def __repr__(self) -> str:
        return f"<nki kernel {self.__name__}>"

    def __getitem__(self, grid: Any) -> "Launcher":
        if runtime.current() is not None:
            raise NkiError("err_nested_kernel_with_spmd_grid",
                           f"Calling kernel with spmd grid ({self.__name__}[...]) inside another kernel is not supported",
                           caller_location())
        return Launcher(self, _normalise_grid(grid))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if runtime.current() is not None:
            return self.func(*args, **kwargs)  # a sub-kernel call inside a running kernel
        return launch(self, (), args, kwargs)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return lambda *a, **k: self(obj, *a, **k)


class HostWrapper(Kernel):
    """A plain Python function a task names as its kernel that launches ``@nki.jit`` kernels itself, as the
    SPMD tutorial's ``nki_tensor_add`` launches ``nki_tensor_add_kernel_[grid_x, grid_y](a, b)``: host code,
    run as Python (no simulation around it), so each kernel it launches — with any grid — is a launch of its
    own. A task's ``GRID`` / ``LNC`` do not apply: the wrapper picks the grid."""

    def __getitem__(self, grid: Any) -> Any:  # itself: no Launcher, the wrapper launches
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.func(*args, **kwargs)
        except NkiError:
            raise
        except (TypeError, AttributeError) as e:
            raise _python_error(e) from e
        except Exception as e:  # user code: any exception becomes a diagnostic at its frame
            raise NkiError("sim_python_exception", f"{type(e).__name__}: {e}",
                           traceback_location(e.__traceback__)) from e


def launches_a_kernel(func: Callable[..., Any], namespace: dict[str, Any]) -> bool:
    """Whether ``func`` (not a kernel) names a kernel of ``namespace`` — a host-side wrapper — rather than
    being an undecorated kernel itself."""
    code = getattr(func, "__code__", None)
    if code is None:
        return False
    names = set(code.co_names)
    stack = [c for c in code.co_consts if hasattr(c, "co_names")]
    while stack:  # names read by nested functions and comprehensions count too
        inner = stack.pop()
        names.update(inner.co_names)
        stack.extend(c for c in inner.co_consts if hasattr(c, "co_names"))
    return any(isinstance(namespace.get(n), Kernel) for n in names)


class Launcher:
    """``kernel[grid]``: calling it launches every SPMD instance."""

    def __init__(self, kernel: Kernel, grid: tuple[int, ...]) -> None:
        self.kernel = kernel
        self.grid = grid

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return launch(self.kernel, self.grid, args, kwargs)

    @property
    def func(self) -> Callable[..., Any]:
        return self.kernel.func


def _normalise_grid(grid: Any) -> tuple[int, ...]:
    items = grid if isinstance(grid, tuple) else (grid,)
    out: list[int] = []
    for g in items:
        out.append(int(getattr(g, "size", g) or 0))
    return tuple(out)


def _target_for(kernel: Kernel) -> str:
    opt = kernel.options.get("platform_target")
    return resolve_target(DEFAULTS.get().target, kernel_option=str(opt) if opt else None,
                          environment=environment_target(), generation=kernel.generation)


def launch(kernel: Kernel, grid: tuple[int, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run a kernel on the simulator and return NumPy results."""
    if runtime.current() is not None:  # a launch from kernel code is a sub-kernel call, never a way to NumPy
        if grid:
            raise NkiError("err_nested_kernel_with_spmd_grid",
                           f"Calling kernel with spmd grid ({kernel.__name__}[...]) inside another kernel is not "
                           "supported", caller_location())
        return kernel.func(*args, **kwargs)
    defaults = DEFAULTS.get()
    sim = new_launch(_target_for(kernel), kernel.generation, grid, defaults)
    _check_grid(sim.target, kernel, grid)
    func = kernel.func
    sim.kernel_code = getattr(func, "__code__", None)
    sim.kernel_file = sim.kernel_code.co_filename if sim.kernel_code else ""
    sim.strict_params = returns_outputs(sim.kernel_code)
    if sim.tracer is not None:
        sim.tracer.trace.kernel_file = sim.kernel_file
    record = LaunchRecord(kernel.__name__, sim.target.name, kernel.generation, grid)
    rec = defaults.recorder
    with runtime.activate(sim), np.errstate(all="ignore"):  # NaN/inf are values here, as on the engines
        params = _bind_params(func, kernel.generation, args, kwargs)
        result: Any = None
        for n_instance, pid in enumerate(instances_of(grid)):
            begin_instance(sim, n_instance, pid)
            token = None
            if rec is not None:
                rec.begin_instance(pid)
                token = rec.activate()
            try:
                result = func(*params.args, **params.kwargs)
            except TensorAttributeError as e:
                if e.location is None:  # special names are refused without looking up the caller (probes)
                    e.location = traceback_location(e.__traceback__)
                raise
            except NkiError:
                raise
            except (TypeError, AttributeError) as e:
                raise _python_error(e) from e
            except RecursionError as e:
                raise NkiError("sim_python_exception", f"RecursionError: {e}", traceback_location(e.__traceback__)) from e
            except MemoryError as e:
                raise NkiError("sim_memory_limit", "kernel exhausted memory while simulating",
                               traceback_location(e.__traceback__)) from e
            except Exception as e:  # user code: any exception becomes a diagnostic at the kernel frame
                raise NkiError("sim_python_exception", f"{type(e).__name__}: {e}",
                               traceback_location(e.__traceback__)) from e
            finally:
                if rec is not None:
                    rec.live = False
                    rec.deactivate(token)
            if rec is not None:
                rec.end_instance(result)
        outputs = finish_launch(sim, record, result)
        if any(type(a).__module__.startswith("torch") for a in list(args) + list(kwargs.values())):
            outputs = _to_torch(outputs)  # a torch caller gets torch tensors back, as from a real device
        record.mutated_inputs = [n for n, v in params.arguments.items() if isinstance(v, Tensor) and storage_of(v).mutated]
        _write_back(func, params, args, kwargs)
    record.outputs = outputs
    if defaults.observer is not None:
        defaults.observer(record)
    return outputs


def new_launch(target: str, generation: str, grid: tuple[int, ...], defaults: LaunchDefaults) -> runtime.Simulation:
    """The simulation of one launch as ``defaults`` ask for it (time limit, instruction trace, arithmetic)."""
    sim = runtime.new_simulation(target, generation, defaults.time_limit)
    sim.grid = grid
    sim.arithmetic = defaults.arithmetic
    if defaults.trace:
        sim.tracer = Tracer(defaults.trace_limit, defaults.arithmetic)
        sim.tracer.trace.target = sim.target.name
        sim.tracer.trace.generation = generation
        sim.tracer.trace.grid = grid
    return sim


def instances_of(grid: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The program ids of every SPMD instance, in the order they run."""
    return list(itertools.product(*[range(g) for g in grid])) if grid else [()]


def begin_instance(sim: runtime.Simulation, n_instance: int, pid: tuple[int, ...]) -> None:
    sim.program_ids = pid
    sim.program_index, sim.program_start = n_instance, sim.instructions
    sim.shared_seen.clear()
    if sim.tracer is not None:
        sim.tracer.instance = n_instance


def finish_launch(sim: runtime.Simulation, record: LaunchRecord, result: Any) -> Any:
    """After the last instance: outputs checked and converted to NumPy; the record's facts filled in."""
    _check_outputs_written(result, sim.generation)
    sim.warnings.extend(sim.memory.check())
    peaks = sim.memory.peaks()
    record.stores = sim.stores.for_outputs(_output_storages(result))
    outputs = _to_numpy(result)
    record.trace = sim.trace
    record.peak_sbuf_bytes = peaks["sbuf"][0]
    record.peak_psum_bytes = peaks["psum"][0]
    record.instructions = sim.instructions
    record.warnings = sim.warnings
    if sim.tracer is not None:
        record.instruction_trace = sim.tracer.trace
    return outputs


def _output_storages(result: Any) -> list[Any]:
    """The storage of each returned output, in the order verification numbers them (None: not a whole tensor)."""
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    return [storage_of(x) if isinstance(x, Tensor) and view_of(x).is_full else None for x in outs]


def _python_error(e: Exception) -> NkiError:
    """A TypeError / AttributeError of kernel code; NumPy's refusal of a tile (an explicit ufunc call,
    ``__array_ufunc__ = None``) and generic attribute lookups on a tile are host access."""
    loc = traceback_location(e.__traceback__)
    text = str(e)
    if isinstance(e, TypeError) and _UFUNC_REFUSED in text:
        return host_access_error(called_function(loc, "a NumPy ufunc"), loc)
    if isinstance(e, AttributeError) and text.startswith("'Tensor' object has no attribute"):
        # object.__getattribute__(t, name) and the like skip Tensor.__getattr__
        return NkiError(HOST_ACCESS, f"{text}: simulator internals are not part of NKI", loc)
    return NkiError("sim_python_exception", f"{type(e).__name__}: {e}", loc)


def kernel_location(kernel: Kernel) -> SourceLocation | None:
    """Where the kernel's ``def`` is (for problems about the launch as a whole)."""
    import linecache

    code = getattr(kernel.func, "__code__", None)
    if code is None:
        return None
    for k in range(code.co_firstlineno, code.co_firstlineno + 50):
        if linecache.getline(code.co_filename, k).lstrip().startswith(("def ", "async def ")):
            return SourceLocation(code.co_filename, k, 1)
    return SourceLocation(code.co_filename, code.co_firstlineno, 1)


def _write_back(func: Callable[..., Any], params: inspect.BoundArguments, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> None:
    """Old-style kernels write results into NumPy arrays passed as parameters (as ``simulate_kernel`` does):
    copy what the kernel wrote back into the caller's arrays."""
    try:
        original = _signature(func).bind(*args, **kwargs).arguments
    except (TypeError, ValueError):
        return
    for name, value in params.arguments.items():
        src = original.get(name)
        if not isinstance(value, Tensor):
            continue
        st = storage_of(value)
        if st.mutated and isinstance(src, np.ndarray) and src.flags.writeable and src.shape == st.array.shape \
                and src.dtype == st.array.dtype:
            src[...] = st.array


def _check_grid(target: Target, kernel: Kernel, grid: tuple[int, ...]) -> None:
    if grid and kernel.generation == runtime.NEW:
        if len(grid) != 1 or grid[0] > target.max_lnc:
            raise NkiError("sim_invalid_argument",
                           f"new-API launches take one logical-NeuronCore degree, kernel[lnc] with lnc <= "
                           f"{target.max_lnc} on {target.name}; got kernel{list(grid)}",
                           caller_location() or kernel_location(kernel))
    if any(g <= 0 for g in grid):
        raise NkiError("sim_invalid_argument", f"SPMD grid {list(grid)} must have positive sizes", caller_location())
    if int(np.prod(grid or (1,))) > 65536:  # a grid this large is a bug, and would take hours to simulate
        raise NkiError("sim_invalid_argument", f"SPMD grid {list(grid)} is too large to simulate", caller_location())


@functools.lru_cache(maxsize=256)
def _signature(func: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(func)


def _bind_params(func: Callable[..., Any], generation: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> inspect.BoundArguments:
    try:
        sig = _signature(func)
        bound = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise NkiError("sim_invalid_argument", f"kernel '{getattr(func, '__name__', '?')}' called with wrong arguments: {e}",
                       caller_location()) from None
    for name, value in list(bound.arguments.items()):
        param = sig.parameters[name]
        mutable = param.annotation is mutable_tensor or "mutable" in str(param.annotation)
        if param.kind == param.VAR_KEYWORD:  # **kwargs: every array in it is a kernel input too
            bound.arguments[name] = {k: _to_tensor(v, k, generation, mutable) for k, v in value.items()}
        else:  # *args arrive as one tuple, converted element by element
            bound.arguments[name] = _to_tensor(value, name, generation, mutable)
    return bound


def _to_tensor(value: Any, name: str, generation: str, mutable: bool) -> Any:
    """Array-likes (also inside lists, tuples and dicts) become HBM input tensors: kernel code never holds
    the host array of an input."""
    arr = to_numpy_input(value)
    if arr is None:
        if isinstance(value, (list, tuple)) and value:
            items = [_to_tensor(v, f"{name}[{i}]", generation, mutable) for i, v in enumerate(value)]
            if all(a is b for a, b in zip(items, value)):
                return value
            return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
        if isinstance(value, dict) and value:
            return {k: _to_tensor(v, f"{name}[{k!r}]", generation, mutable) for k, v in value.items()}
        return value
    t = input_tensor(arr, name, generation, mutable)
    rec = DEFAULTS.get().recorder
    if rec is not None:
        rec.note_input(value, t, storage_of(t).immutable, name)
    return t


def input_tensor(arr: np.ndarray, name: str, generation: str, mutable: bool) -> Tensor:
    """A kernel input: a shared-HBM tensor over ``arr``, read-only for classic kernels unless declared mutable."""
    t = wrap_array(arr, Buffer("hbm", shared=True, label="shared_hbm"), name)
    st = storage_of(t)
    st.is_param = True
    st.immutable = generation == runtime.CLASSIC and not mutable
    return t


def to_numpy_input(value: Any) -> np.ndarray | None:
    """NumPy view of an array-like kernel argument (torch tensors keep bf16 as bf16)."""
    if isinstance(value, np.ndarray):
        return np.ascontiguousarray(value) if not value.flags.c_contiguous else value.copy()
    mod = type(value).__module__
    if mod.startswith("torch"):
        t = value.detach().cpu().contiguous()
        name = str(t.dtype).replace("torch.", "")
        if name == "bfloat16":
            import torch

            return t.view(torch.int16).numpy().view(dtypes.bfloat16).copy()
        return t.numpy().copy()
    if isinstance(value, Tensor):
        return host_copy(value)
    return None


def _check_outputs_written(result: Any, generation: str) -> None:
    for t in _tensors_in(result):
        st = storage_of(t)
        if generation == runtime.NEW and t.buffer.is_hbm and not t.buffer.shared and not st.is_param:
            raise NkiError("err_unsupported_memory",
                           f"kernel output `{t.name}` is in {t.buffer.label}; new-API kernel outputs must be "
                           "allocated with buffer=nl.shared_hbm", st.site or caller_location())
        if t.buffer.is_hbm and not st.written:
            related = (Related(st.site, f"output `{t.name}` created here"),) if st.site else ()
            raise NkiError("err_tensor_output_not_written_to",
                           f"output tensor `{t.name}` {list(t.shape)} is returned but never written (check for "
                           "loops that run zero times)", st.site or caller_location(), related)
        if t.buffer.is_on_chip:  # the SDK's simulation-mode examples do this; hardware builds reject it
            sim = runtime.current()
            if sim is not None:
                sim.warnings.append(NkiError(
                    "err_unsupported_memory", f"kernel returns `{t.name}` which lives in {t.buffer.label}; outputs "
                    "must be HBM tensors (nl.ndarray(..., buffer=nl.shared_hbm)) written with nl.store",
                    st.site or caller_location(), severity="warning"))


def _to_torch(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        import torch

        if x.dtype == dtypes.bfloat16:
            return torch.from_numpy(x.view(np.int16).copy()).view(torch.bfloat16)
        if x.dtype.kind == "V" or x.dtype in (dtypes.float8_e4m3, dtypes.float8_e5m2, dtypes.float8_e4m3fn):
            return x
        return torch.from_numpy(x)
    if isinstance(x, tuple):
        return tuple(_to_torch(v) for v in x)
    if isinstance(x, list):
        return [_to_torch(v) for v in x]
    return x


def _tensors_in(x: Any) -> list[Tensor]:
    if isinstance(x, Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors_in(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors_in(v)]
    return []


def _to_numpy(x: Any) -> Any:
    if isinstance(x, Tensor):
        return host_copy(x)
    if isinstance(x, tuple):
        return tuple(_to_numpy(v) for v in x)
    if isinstance(x, list):
        return [_to_numpy(v) for v in x]
    if isinstance(x, dict):
        return {k: _to_numpy(v) for k, v in x.items()}
    return x
