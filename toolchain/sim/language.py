"""The simulated ``nki.language`` namespace, built for either API generation.

``build(generation)`` returns a module whose attributes are the simulator's implementations. The
classic module (``neuronxcc.nki.language``) has ``arange``/``mgrid``/``mask=``; the new module
(``nki.language``) rejects them with ``sim_removed_api`` and treats every range as a plain loop.
"""

from __future__ import annotations

import ast
import contextvars
import types
from functools import lru_cache
from typing import Any, Callable, Iterator

import numpy as np

from nki_agent.toolchain.facts import dtypes
from nki_agent.toolchain.facts.errors import NkiError, SourceLocation
from ..location import ast_context, caller_location
from .compile_checks import mark_reduction
from . import runtime
from .buffers import hbm, private_hbm, psum, sbuf, shared_hbm
from .index import arange, ds, mgrid
from .instrument import instrument
from .record import wrap_namespace
from .ops import elementwise, memory, reduce
from .ops import matmul as mm
from .tensor import Tensor, par_dim, storage_of, values_of


class UnsupportedApi(NkiError, AttributeError):
    """An NKI API the simulator does not model (an AttributeError so ``hasattr`` stays truthful)."""


def unsupported(qualname: str) -> Callable[..., Any]:
    def f(*args: Any, **kwargs: Any) -> Any:
        raise NkiError("sim_unsupported_api", f"{qualname} is not modelled by the embedded simulator yet",
                       caller_location())

    f.__name__ = qualname.rsplit(".", 1)[-1]
    return f


class TileSize:
    """``nl.tile_size``: hardware tile limits (values from the NKI tiling overview)."""

    pmax = 128  # partitions
    psum_fmax = 512  # fp32 elements per PSUM bank per partition (classic name)
    psum_bank_fmax = 512  # new name
    psum_bank_fmax_bytes = 2048
    psum_num_banks = 8
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_min_align = 4
    sbuf_min_align = 1

    @property
    def total_available_sbuf_size(self) -> int:
        s = runtime.current()
        return s.target.sbuf_bytes_per_partition if s else 180224

    sbuf_fmax_bytes = total_available_sbuf_size

    @property
    def sbuf_fmax(self) -> int:
        return self.total_available_sbuf_size // 4

    @property
    def sbuf_size_bytes(self) -> int:
        return self.total_available_sbuf_size * 128


class SpmdDim:
    """``nl.nc(n)`` / ``nl.spmd_dim(...)``: a grid dimension spread over NeuronCores (serial here)."""

    def __init__(self, size: int) -> None:
        self.size = int(size)

    def __mul__(self, other: Any) -> "SpmdDim":
        return SpmdDim(self.size * int(getattr(other, "size", other)))

    __rmul__ = __mul__

    def __int__(self) -> int:
        return self.size

    def __index__(self) -> int:
        return self.size


def nc(n: int) -> SpmdDim:
    return SpmdDim(n)


def spmd_dim(*dims: Any) -> SpmdDim:
    size = 1
    for d in dims:
        size *= int(getattr(d, "size", d))
    return SpmdDim(size)


def program_id(axis: int = 0) -> int:
    s = runtime.require("program_id")
    if not s.program_ids:
        if int(axis) != 0:
            raise NkiError("sim_invalid_argument", f"program_id({axis}) but the kernel was launched without a grid",
                           caller_location())
        return 0
    if int(axis) >= len(s.program_ids):
        raise NkiError("sim_invalid_argument",
                       f"program_id axis {axis} out of bounds for a grid of rank {len(s.program_ids)}",
                       caller_location())
    return s.program_ids[int(axis)]


def num_programs(axes: Any = None) -> int:
    s = runtime.require("num_programs")
    grid = s.grid or (1,)
    if axes is None:
        return int(np.prod(grid))
    if isinstance(axes, (list, tuple)):
        return int(np.prod([grid[a] for a in axes]))
    return grid[int(axes)] if int(axes) < len(grid) else 1


def program_ndim() -> int:
    return len(runtime.require("program_ndim").grid)


@lru_cache(maxsize=1024)
def _loop_var(path: str, line: int, column: int) -> str:
    for node in ast_context(SourceLocation(path, line, column))[1:4]:
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name):
            return node.target.id
    return "i"


def _range_args(args: tuple[Any, ...]) -> range:
    try:
        return range(*[int(a) for a in args])
    except TypeError as e:
        if any(isinstance(a, Tensor) for a in args):
            raise NkiError("err_dynamic_control_flow_not_supported",
                           "loop bounds must be compile-time integers, not tensor values", caller_location()) from None
        raise NkiError("sim_invalid_argument", f"invalid range arguments: {e}", caller_location()) from None


def _loop_site() -> tuple[str, int]:
    """The loop variable's name and the ``for`` line of the range being created (for the trace's loop nest)."""
    loc = caller_location()
    if loc is None:
        return "i", 0
    return _loop_var(loc.path, loc.line, loc.column), loc.line


def affine_range(*args: Any, **kwargs: Any) -> Iterator[int]:
    r = _range_args(args)
    name, line = _loop_site()
    return runtime.affine_loop(iter(r), name, line)


def sequential_range(*args: Any, **kwargs: Any) -> Iterator[int]:
    r = _range_args(args)
    name, line = _loop_site()
    return runtime.plain_loop(iter(r), "sequential", name, line)


def static_range(*args: Any, **kwargs: Any) -> Iterator[int]:
    r = _range_args(args)
    name, line = _loop_site()
    return runtime.plain_loop(iter(r), "static", name, line)


def _new_range_of(kind: str) -> Callable[..., Iterator[int]]:
    """The new API's ranges: plain loops for the checks; the trace keeps their kind for the cost model."""

    def new_range(start: Any, stop: Any = None, step: Any = 1) -> Iterator[int]:
        args = (start,) if stop is None else (start, stop, step)
        r = _range_args(args)
        name, line = _loop_site()
        return runtime.plain_loop(iter(r), kind, name, line)

    new_range.__name__ = f"{kind}_range"
    return new_range


def static_cast(input_data: Any, dtype: Any) -> np.ndarray:
    return dtypes.cast(dtypes.to_fp32(np.asarray(input_data)), dtype)


def device_print(prefix: Any, x: Any = None, mask: Any = None, **kwargs: Any) -> None:
    """Print a tensor's values, as the NKI simulator does: to the process's stderr (the file descriptor, not
    ``sys.stdout``/``sys.stderr``, which kernel code could swap for a buffer to read tile values back) with
    fixed print options (long tiles are summarised)."""
    import os

    vals = values_of(x) if isinstance(x, Tensor) else x
    text = np.array2string(np.asarray(vals), threshold=1000, precision=6) if isinstance(x, Tensor) else str(vals)
    try:
        os.write(2, f"{prefix} {text}\n".encode("utf-8", "replace"))
    except OSError:
        pass


class _Finfo:
    def __init__(self, dt: Any) -> None:
        import ml_dtypes

        info = ml_dtypes.finfo(dtypes.as_dtype(dt))
        self.min, self.max, self.eps, self.tiny = float(info.min), float(info.max), float(info.eps), float(info.tiny)
        self.dtype = dtypes.as_dtype(dt)


def finfo(dt: Any) -> _Finfo:
    return _Finfo(dt)


class _NoReorder:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def no_reorder() -> _NoReorder:
    return _NoReorder()


class _FloatConstants:
    """``nl.fp32.min`` / ``nl.bfp16.min``: extreme finite values of a float type (classic constants)."""

    def __init__(self, dt: Any) -> None:
        import ml_dtypes

        info = ml_dtypes.finfo(dtypes.as_dtype(dt))
        self.min = float(info.min)
        self.max = float(info.max)


def rand(shape: Any, dtype: Any = np.float32, buffer: Any = None, name: str = "", **kwargs: Any) -> Tensor:
    """``nl.rand``: uniform [0, 1) values (the NumPy generator, seeded by the verifier per seed)."""
    from .ops import common as c

    c.sim("rand")
    shp = tuple(int(s) for s in shape)
    return c.emit(np.random.random_sample(shp).astype(np.float32), dtype, fresh=True)


_CLASSIC_ONLY = {"arange", "mgrid"}

def loop_reduce(x: Any, op: Any, loop_indices: Any = None, dtype: Any = None, mask: Any = None, **kw: Any) -> Tensor:
    """``b = nl.loop_reduce(a, op, loop_indices)``: the destination ``b`` is also op's left input, i.e.
    ``b = op(b, a)`` across the loop (the docs' equivalence). The destination is what the call is assigned
    to (a name, or a subscript such as ``acc[i, :, 0]``), evaluated in the kernel's frame; an unbound or
    non-tile destination, and any destination element the kernel never wrote, starts from ``a``."""
    from .ops import common as c

    c.sim("loop_reduce")
    prev = _loop_reduce_destination()
    m = c.mask_of(mask)
    vals = c.fp32(x, m)
    out_dt = dtypes.as_dtype(dtype) if dtype is not None else (x.dtype if isinstance(x, Tensor) else dtypes.float32)
    if isinstance(prev, Tensor) and prev.size == vals.size and not storage_of(prev).unpoisoned:
        old = c.fp32(prev).reshape(vals.shape)
        combined = c.apply_alu("loop_reduce", op, old, vals)
        if dtypes.is_float(prev.dtype):
            # never-written (poisoned) elements: the compiler's own NKI output (AccelOpt's NKIBench baselines,
            # validated on hardware) reduces into fresh nl.ndarray slices, so the first iteration writes ``a``
            combined = np.where(np.isnan(old), vals, combined)
        vals = combined
    result = c.emit(np.array(vals), out_dt, m)
    mark_reduction(storage_of(result))
    return result


_UNSET = object()
# the destination a replayed ``loop_reduce`` had when it was traced (``sim/replay.py``; no frames there)
REPLAY_DESTINATION: contextvars.ContextVar[Any] = contextvars.ContextVar("nki_loop_reduce_dest", default=_UNSET)


def _loop_reduce_destination() -> Any:
    """The current value of the target ``loop_reduce``'s result is assigned to, or None."""
    import sys

    from ..location import user_frame

    given = REPLAY_DESTINATION.get()
    if given is not _UNSET:
        return given

    frame = user_frame(sys._getframe(2))
    loc = caller_location()
    if frame is None or loc is None:
        return None
    for node in ast_context(loc)[1:4]:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                return frame.f_locals.get(target.id)
            if isinstance(target, ast.Subscript):
                try:  # the same subscript, read: plain names, slices and nl.arange index expressions
                    return eval(ast.unparse(target), frame.f_globals, dict(frame.f_locals))
                except Exception:  # noqa: BLE001 - an unreadable destination is treated as unbound
                    return None
            return None
    return None


_UNSUPPORTED = ["all_reduce", "gather_flattened", "atomic_rmw", "random_seed", "dropout",
                "fori_loop", "while_loop", "dynamic_range", "select_reduce"]


# namespace functions that are not instructions (loops, ids, constants, index helpers): never traced
_NOT_INSTRUCTIONS = {"affine_range", "sequential_range", "static_range", "program_id", "num_programs",
                     "program_ndim", "nc", "spmd_dim", "par_dim", "ds", "static_cast", "device_print", "finfo",
                     "no_reorder", "arange", "mgrid", "ndarray"}


def build(generation: str) -> types.ModuleType:
    """Create the ``nki.language`` module object for one API generation."""
    name = "neuronxcc.nki.language" if generation == runtime.CLASSIC else "nki.language"
    mod = types.ModuleType(name, "NKI language (embedded simulator)")
    ns: dict[str, Any] = {}
    ns.update(dtypes.ALL)
    ns.update({"sbuf": sbuf, "psum": psum, "hbm": hbm, "private_hbm": private_hbm, "shared_hbm": shared_hbm,
               "par_dim": par_dim, "ds": ds, "tile_size": TileSize(), "program_id": program_id,
               "num_programs": num_programs, "program_ndim": program_ndim, "nc": nc, "spmd_dim": spmd_dim,
               "static_cast": static_cast, "device_print": device_print, "finfo": finfo, "no_reorder": no_reorder,
               "affine_range": affine_range, "sequential_range": sequential_range, "static_range": static_range,
               "softmax": reduce.softmax, "rms_norm": reduce.rms_norm, "where": elementwise.where,
               "matmul": mm.nl_matmul, "transpose": mm.nl_transpose, "tensor": Tensor, "rand": rand,
               "loop_reduce": loop_reduce,
               "fp32": _FloatConstants(np.float32), "bfp16": _FloatConstants(dtypes.bfloat16),
               "fp16": _FloatConstants(np.float16)})
    for fname in ("ndarray", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like",
                  "ndarray_like", "load", "store", "copy", "broadcast_to", "load_transpose2d",
                  "shared_identity_matrix", "shared_constant"):
        ns[fname] = getattr(memory, fname)
    ns.update({k: v for k, v in elementwise.FUNCTIONS.items() if k != "copy"})
    ns.update(reduce.FUNCTIONS)
    ns["max"] = reduce.FUNCTIONS["max"]
    ns["min"] = reduce.FUNCTIONS["min"]
    ns["maximum"] = elementwise.FUNCTIONS["maximum"]
    for tag in ("add", "subtract", "multiply", "maximum", "minimum"):
        ns[tag].__nki_op__ = tag
    for n in ("max", "min", "sum"):
        ns[n].__nki_op__ = {"max": "maximum", "min": "minimum", "sum": "add"}[n]
    ns["bypass"] = elementwise.FUNCTIONS["bypass"]
    ns["identity"] = elementwise.FUNCTIONS["copy"]
    ns["prelu"] = unsupported(f"{name}.prelu")
    ns["average"] = unsupported(f"{name}.average")
    for u in _UNSUPPORTED:
        ns[u] = unsupported(f"{name}.{u}")
    if generation == runtime.CLASSIC:
        ns["arange"] = arange
        ns["mgrid"] = mgrid
    else:
        ns["affine_range"] = _new_range_of("affine")
        ns["sequential_range"] = _new_range_of("sequential")
        ns["static_range"] = _new_range_of("static")
        for k in list(ns):
            if callable(ns[k]) and getattr(ns[k], "__module__", "").startswith(__package__ or "nki_agent"):
                ns[k] = _reject_mask(ns[k], k)
    for k in list(ns):
        if k not in _NOT_INSTRUCTIONS and isinstance(ns[k], types.FunctionType) and \
                getattr(ns[k], "__module__", "").startswith(__package__ or "nki_agent"):
            ns[k] = instrument(ns[k], f"nl.{k}")
    wrap_namespace(ns, "nl")  # every call is an event of the traced program (record.py)
    mod.__dict__.update(ns)

    def __getattr__(attr: str) -> Any:
        if generation == runtime.NEW and attr in _CLASSIC_ONLY:
            raise UnsupportedApi("sim_removed_api",
                                 f"nki.language.{attr} was removed in the new NKI API; use slices or nl.ds instead",
                                 caller_location())
        raise UnsupportedApi("sim_unsupported_api", f"{name}.{attr} is not modelled by the embedded simulator",
                             caller_location())

    mod.__getattr__ = __getattr__  # type: ignore[method-assign]
    return mod


def _reject_mask(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    if isinstance(fn, type) or not isinstance(fn, types.FunctionType):
        return fn

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if "mask" in kwargs:
            raise NkiError("sim_removed_api",
                           f"nl.{name}: mask= was removed in the new NKI API; clamp slices with min() instead",
                           caller_location())
        return fn(*args, **kwargs)

    wrapper.__name__ = fn.__name__
    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    if hasattr(fn, "__nki_op__"):
        wrapper.__nki_op__ = fn.__nki_op__  # type: ignore[attr-defined]
    return wrapper
