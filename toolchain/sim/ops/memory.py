"""Tensor creation and data movement: ``ndarray``/``zeros``/``full``/``*_like``, ``load``, ``store``, ``copy``.

``load`` moves HBM to an SBUF tile, ``store`` moves a tile to HBM; both cast through fp32 when dtypes
differ, and both check memories (``err_unsupported_memory``) and, in the classic API, masks.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from nki_agent.toolchain.facts import dtypes
from nki_agent.toolchain.facts.errors import NkiError
from ...location import caller_location, replay_location
from .. import runtime
from ..buffers import Buffer, as_buffer, psum, sbuf, shared_hbm
from ..predicate import set_predicate
from ..storage import assigned_name
from ..tensor import Tensor, allocate, describe, values_of, view_of, write_into
from . import common as c


def ndarray(shape: Any, dtype: Any, buffer: Any = None, name: str = "", **kwargs: Any) -> Tensor:
    c.sim("ndarray")
    return allocate(shape, dtype, buffer, name)


def zeros(shape: Any, dtype: Any, buffer: Any = None, name: str = "", **kwargs: Any) -> Tensor:
    c.sim("zeros")
    return allocate(shape, dtype, buffer, name, fill=0)


def ones(shape: Any, dtype: Any, buffer: Any = None, name: str = "", **kwargs: Any) -> Tensor:
    c.sim("ones")
    return allocate(shape, dtype, buffer, name, fill=1)


def full(shape: Any, fill_value: Any, dtype: Any, buffer: Any = None, name: str = "", **kwargs: Any) -> Tensor:
    c.sim("full")
    return allocate(shape, dtype, buffer, name, fill=fill_value)


def _like(a: Any, dtype: Any, buffer: Any) -> tuple[tuple[int, ...], Any, Buffer]:
    if not isinstance(a, Tensor):
        raise NkiError("sim_invalid_argument", "*_like expects a tensor", caller_location())
    return a.shape, dtype if dtype is not None else a.dtype, as_buffer(buffer) if buffer is not None else a.buffer


def empty_like(a: Any, dtype: Any = None, buffer: Any = None, name: str = "", **kwargs: Any) -> Tensor:
    c.sim("empty_like")
    shape, dt, buf = _like(a, dtype, buffer)
    return allocate(shape, dt, buf, name)


ndarray_like = empty_like


def zeros_like(a: Any, dtype: Any = None, buffer: Any = None, name: str = "", **kwargs: Any) -> Tensor:
    c.sim("zeros_like")
    shape, dt, buf = _like(a, dtype, buffer)
    return allocate(shape, dt, buf, name, fill=0)


def ones_like(a: Any, dtype: Any = None, buffer: Any = None, name: str = "", **kwargs: Any) -> Tensor:
    c.sim("ones_like")
    shape, dt, buf = _like(a, dtype, buffer)
    return allocate(shape, dt, buf, name, fill=1)


def full_like(a: Any, fill_value: Any, dtype: Any = None, buffer: Any = None, name: str = "", **kwargs: Any) -> Tensor:
    c.sim("full_like")
    shape, dt, buf = _like(a, dtype, buffer)
    return allocate(shape, dt, buf, name, fill=fill_value)


def load(src: Any, mask: Any = None, dtype: Any = None, **kwargs: Any) -> Tensor:
    """HBM -> new SBUF tile (cast through fp32 when ``dtype`` differs)."""
    c.sim("load")
    if not isinstance(src, Tensor):
        raise NkiError("sim_invalid_argument", "nl.load expects an HBM tensor access", caller_location())
    c.require_hbm("load", "src", src)
    m = c.mask_of(mask)
    vals = values_of(src, m)
    out_dt = dtypes.as_dtype(dtype) if dtype is not None else src.dtype
    # the tile is named as the file names it (``t = nl.load(a)`` → 't'), else after its source ('a_tile')
    name = "" if assigned_name(caller_location()) != "tensor" else f"{src.name}_tile"
    shape = tuple(vals.shape)
    if len(shape) < 2:
        shape = (shape[0], 1) if shape else (1, 1)
        vals = vals.reshape(shape)
        m = None if m is None else np.broadcast_to(m, src.shape).reshape(shape)
    if m is None:
        arr = _convert(vals, out_dt)
        if arr is vals or not arr.flags.c_contiguous:
            arr = np.array(arr, dtype=out_dt, copy=True)
        return allocate(shape, out_dt, sbuf, name=name, initial=arr)
    out = allocate(shape, out_dt, sbuf, name=name)
    write_into(out, _convert(vals, out_dt), m)
    set_predicate(view_of(out), np.broadcast_to(m, shape))  # buf[...] = nl.load(..., mask=m) writes only m
    return out


def _convert(vals: np.ndarray, dt: np.dtype[Any]) -> np.ndarray:
    if vals.dtype == dt:
        return vals
    return dtypes.cast(dtypes.to_fp32(vals), dt) if vals.dtype.kind not in "iub" or dt.kind not in "iub" else dtypes.cast(vals, dt)


def store(dst: Any, value: Any, mask: Any = None, **kwargs: Any) -> None:
    """Tile -> HBM. Classic accepts a PSUM value (the compiler inserts a copy); the new API does not."""
    s = c.sim("store")
    if not isinstance(dst, Tensor):
        raise NkiError("sim_invalid_argument", "nl.store expects an HBM tensor access as dst", caller_location())
    c.require_hbm("store", "dst", dst)
    if isinstance(value, Tensor):
        if value.buffer.is_hbm:
            raise NkiError("err_unsupported_memory",
                           f"Expected operand 'value' of 'store' to be in address space 'sbuf', but got a tile in "
                           f"'{value.buffer.label}' instead.", caller_location(), c.where(value))
        if value.buffer.kind == "psum" and s.generation == runtime.NEW:
            raise NkiError("err_unsupported_memory",
                           "nl.store cannot take a PSUM tile in the new NKI API; copy it to SBUF first "
                           "(nisa.tensor_copy)", caller_location(), c.where(value))
    m = c.mask_of(mask)
    vals = c.values(value, m)
    if isinstance(value, Tensor) and vals.size == dst.size and vals.shape != dst.shape:
        vals = vals.reshape(dst.shape)  # e.g. a (P, 1) tile stored into a 1-D HBM vector
    write_into(dst, _convert(np.asarray(vals), dst.dtype) if np.ndim(vals) else vals, m)


def copy(src: Any, mask: Any = None, dtype: Any = None, **kwargs: Any) -> Tensor:
    c.sim("copy")
    c.require_on_chip("copy", "src", src)
    m = c.mask_of(mask)
    vals = c.values(src, m)
    out_dt = dtypes.as_dtype(dtype) if dtype is not None else (src.dtype if isinstance(src, Tensor) else dtypes.float32)
    return c.emit(_convert(np.asarray(vals), out_dt), out_dt, m)


def broadcast_to(src: Any, shape: Any = None, dtype: Any = None, **kwargs: Any) -> Tensor:
    c.sim("broadcast_to")
    shape = tuple(int(s) for s in (shape if shape is not None else kwargs["shape"]))
    vals = c.values(src)
    try:
        res = np.broadcast_to(vals, shape)
    except ValueError:
        raise NkiError("sim_shape_mismatch", f"cannot broadcast {list(vals.shape)} to {list(shape)}",
                       caller_location()) from None
    out_dt = dtypes.as_dtype(dtype) if dtype is not None else vals.dtype
    return c.emit(np.array(res), out_dt)


def load_transpose2d(src: Any, mask: Any = None, dtype: Any = None, **kwargs: Any) -> Tensor:
    c.sim("load_transpose2d")
    c.require_hbm("load_transpose2d", "src", src)
    vals = c.values(src, c.mask_of(mask))
    if vals.ndim != 2:
        raise NkiError("err_exceed_max_supported_dimension",
                       f"parameter '{describe(src)}' of 'load_transpose2d' exceed max supported number of dimensions of 2.",
                       caller_location())
    out_dt = dtypes.as_dtype(dtype) if dtype is not None else vals.dtype
    res = vals.T
    if res.shape[0] > runtime.require("load_transpose2d").target.pmax:
        raise NkiError("err_num_partition_exceed_arch_limit",
                       f"number of partitions {res.shape[0]} exceed architecture limitation of 128.", caller_location())
    return c.emit(np.array(res), out_dt)


def shared_identity_matrix(n: int, dtype: Any = np.uint8, dst: Any = None, **kwargs: Any) -> Tensor:
    """Classic: a shared HBM constant (kernels nl.load it); new API: an SBUF tile (or written into ``dst``)."""
    s = c.sim("shared_identity_matrix")
    if dst is not None:
        write_into(dst, np.eye(int(n)))
        return dst  # type: ignore[no-any-return]
    buf = sbuf if s.generation == runtime.NEW else shared_hbm
    out = allocate((int(n), int(n)), dtype, buf, name="identity", initial=dtypes.cast(np.eye(int(n)), dtype))
    return out


def load_constant(constant: Any) -> Any:
    """A ``shared_constant`` argument with a ``.npy`` path read into its array (the documented forms: an array or
    a path); anything else as given. Run where the kernel's code runs (the tracer), so the program it records
    carries the values and the executor never opens a file a program names."""
    if isinstance(constant, (str, os.PathLike)):
        loc = caller_location()
        try:
            return np.load(constant, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise NkiError("sim_unsupported_api", f"shared_constant: cannot read the .npy file {str(constant)!r} "
                           f"({type(e).__name__}: {e}); the simulator's jail holds the kernel file and the modules "
                           "it imports, so pass the constant as a NumPy array", loc) from None
    return constant


def shared_constant(constant: Any, dtype: Any = None, **kwargs: Any) -> Tensor:
    c.sim("shared_constant")
    if isinstance(constant, (str, os.PathLike)) and replay_location() is not None:
        # a replayed program carries values, never paths: its recorder read the file where the kernel ran
        raise NkiError("sim_sandbox_violation", "a traced program named a file for shared_constant; programs carry "
                       "the constant's values", replay_location())
    arr = np.asarray(load_constant(constant))
    if dtype is not None:
        arr = dtypes.cast(arr, dtype)
    return allocate(arr.shape, arr.dtype, shared_hbm, name="constant", initial=np.array(arr, copy=True))


__all__ = ["psum", "sbuf"]
