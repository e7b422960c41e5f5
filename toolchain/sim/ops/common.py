"""Shared machinery of simulated instructions: operands, result tiles, and the common checks.

Every op follows one shape: resolve operands (checking their memory), compute in fp32 with NumPy,
then either allocate a result tile (classic API, ops return tiles) or write into ``dst`` (new API).
The checks here raise the documented NKI error ids at the user's call site.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from nki_agent.toolchain.facts import dtypes
from nki_agent.toolchain.facts.errors import NkiError, Related
from ...location import caller_location
from .. import runtime
from ..buffers import Buffer, psum, sbuf
from ..index import Index, Mask
from ..predicate import set_predicate
from ..tensor import Tensor, allocate, describe, mask_values, storage_of, values_of, view_of, write_into

ALU: dict[str, Any] = {}  # op name -> numpy implementation on fp32 arrays, filled by elementwise.py


def sim(api: str) -> runtime.Simulation:
    s = runtime.require(api)
    s.tick()
    return s


def is_tile(x: Any) -> bool:
    return isinstance(x, Tensor)


def values(x: Any, mask: Any = None) -> np.ndarray:
    """Raw values of an operand in its own dtype (tensor, index expression or scalar)."""
    if isinstance(x, Tensor):
        return values_of(x, mask)
    if isinstance(x, Index):
        return x.values
    if isinstance(x, Mask):
        return x.values
    return np.asarray(x)


def fp32(x: Any, mask: Any = None) -> np.ndarray:
    """Operand values as the engines see them: converted to fp32."""
    v = values(x, mask)
    if v.dtype == np.float32:
        return v
    with np.errstate(over="ignore", invalid="ignore"):
        return v.astype(np.float32)


def where(t: Tensor) -> tuple[Related, ...]:
    st = storage_of(t)
    if st.site is None:
        return ()
    return (Related(st.site, f"`{t.name}` {list(st.shape)} in {t.buffer.label} created here"),)


def require_on_chip(api: str, name: str, x: Any, allow_psum: bool = True, allow_sbuf: bool = True) -> None:
    """Operand must be a tile in SBUF (or PSUM when allowed): ``err_unsupported_memory`` otherwise."""
    if not isinstance(x, Tensor):
        return
    kind = x.buffer.kind
    ok = (kind == "sbuf" and allow_sbuf) or (kind == "psum" and allow_psum)
    if not ok:
        expected = "|".join(k for k, a in (("sbuf", allow_sbuf), ("psum", allow_psum)) if a)
        raise NkiError("err_unsupported_memory",
                       f"Expected operand '{name}' of '{api}' to be in address space '{expected}', but got a tile in "
                       f"'{x.buffer.label}' instead.", caller_location(), where(x))


def require_hbm(api: str, name: str, x: Any) -> None:
    if isinstance(x, Tensor) and not x.buffer.is_hbm:
        raise NkiError("err_unsupported_memory",
                       f"Expected operand '{name}' of '{api}' to be in address space 'hbm', but got a tile in "
                       f"'{x.buffer.label}' instead.", caller_location(), where(x))


def partitions(x: Tensor) -> int:
    return x.shape[0] if x.ndim else 1


def check_partition_limit(api: str, name: str, x: Any) -> None:
    if isinstance(x, Tensor) and x.buffer.is_on_chip and x.ndim and x.shape[0] > runtime.require(api).target.pmax:
        raise NkiError("err_num_partition_exceed_arch_limit",
                       f"number of partitions {x.shape[0]} of '{name}' {describe(x)} of '{api}' exceed architecture "
                       f"limitation of {runtime.require(api).target.pmax}.", caller_location(), where(x))


def check_same_partitions(api: str, named: Iterable[tuple[str, Any]]) -> None:
    tiles = [(n, t) for n, t in named if isinstance(t, Tensor) and t.ndim]
    if len({t.shape[0] for _, t in tiles}) > 1:
        desc = ", ".join(f"{n}{list(t.shape)}" for n, t in tiles)
        raise NkiError("err_num_partition_mismatch",
                       f"number of partitions (dimension 0 size of a tile) mismatch in parameters ({desc}) of '{api}'",
                       caller_location(), tuple(r for _, t in tiles for r in where(t)))


def check_not_both_psum(api: str, a: Any, b: Any) -> None:
    if isinstance(a, Tensor) and isinstance(b, Tensor) and a.buffer.kind == "psum" and b.buffer.kind == "psum":
        raise NkiError("err_unsupported_memory",
                       f"'{api}' cannot read both inputs from PSUM; copy one of them to SBUF first",
                       caller_location(), where(a) + where(b))


def broadcast(api: str, *arrays: np.ndarray) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*[a.shape for a in arrays]))
    except ValueError:
        raise NkiError("sim_shape_mismatch",
                       f"operand shapes {[list(a.shape) for a in arrays]} of '{api}' cannot be broadcast together",
                       caller_location()) from None


def result_dtype(dtype: Any, *operands: Any) -> np.dtype[Any]:
    """Explicit dtype, else the classic promotion of tile operands (weak scalars widen, per the docs)."""
    if dtype is not None:
        return dtypes.as_dtype(dtype)
    typed = [o.dtype for o in operands if isinstance(o, Tensor)]
    if not typed:
        return dtypes.float32
    out = typed[0]
    for t in typed[1:]:
        out = dtypes.promote(out, t)
    for o in operands:
        if not isinstance(o, (Tensor, Index, Mask)) and o is not None and np.ndim(o) == 0:
            # weak (untyped) scalars count as the widest hardware type of their kind: int32 / fp32
            out = dtypes.promote(out, dtypes.weak_scalar_dtype(o))
    return out


def new_tile(shape: tuple[int, ...], dtype: Any, buffer: Buffer | None = None, name: str = "") -> Tensor:
    return allocate(shape, dtype, buffer or sbuf, name=name)


def emit(result: np.ndarray, dtype: Any, mask: Any = None, buffer: Buffer | None = None, name: str = "",
         fresh: bool = False) -> Tensor:
    """Classic-API result: a new tile (SBUF unless told) holding ``result`` cast to ``dtype``.

    ``fresh`` says the caller owns ``result`` (a new array), so it can become the tile's storage.
    """
    result = np.asarray(result)
    shape = tuple(result.shape)
    if len(shape) < 2:
        shape = (shape[0], 1) if shape else (1, 1)
        result = result.reshape(shape)
    if mask is None:
        dt = dtypes.as_dtype(dtype)
        arr = dtypes.cast(result, dt)
        if (arr is result and not fresh) or not arr.flags.writeable or not arr.flags.c_contiguous:
            arr = np.array(arr, dtype=dt, copy=True)
        return allocate(shape, dt, buffer or sbuf, name=name, initial=arr)
    out = new_tile(shape, dtype, buffer, name)
    write_into(out, result, mask)
    set_predicate(view_of(out), mask)  # dst[...] = op(..., mask=m) writes only m (see sim/predicate.py)
    return out


def store_into(api: str, dst: Any, result: np.ndarray) -> None:
    """New-API result: write into ``dst`` (shapes must agree up to size-1 broadcasting)."""
    if not isinstance(dst, Tensor):
        raise NkiError("sim_invalid_argument", f"'{api}' needs a dst tensor as its first argument", caller_location())
    if dst.size != result.size and not _broadcastable(result.shape, dst.shape):
        raise NkiError("sim_shape_mismatch",
                       f"'{api}' result shape {list(result.shape)} does not match dst {describe(dst)}",
                       caller_location(), where(dst))
    if result.shape != dst.shape:
        result = result.reshape(dst.shape) if dst.size == result.size else np.broadcast_to(result, dst.shape)
    write_into(dst, result)


def _broadcastable(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    try:
        return np.broadcast_shapes(src, dst) == tuple(dst)
    except ValueError:
        return False


def op_name(op: Any) -> str:
    """Name of an ALU operator given as an nl function, a NumPy ufunc or a string."""
    if op is None:
        return "bypass"
    name = getattr(op, "__nki_op__", None)
    if name:
        return str(name)
    if isinstance(op, str):
        return op
    n = getattr(op, "__name__", None) or str(op)
    return {"true_divide": "divide", "absolute": "abs", "max": "maximum", "min": "minimum", "sum": "add",
            "amax": "maximum", "amin": "minimum", "prod": "multiply"}.get(n, n)


def apply_alu(api: str, op: Any, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    name = op_name(op)
    fn = ALU.get(name)
    if fn is None:
        raise NkiError("sim_unsupported_api", f"operator '{name}' of '{api}' is not modelled by the embedded simulator",
                       caller_location())
    return fn(a) if b is None else fn(a, b)  # launch() runs kernels under np.errstate(all="ignore")


def mask_of(mask: Any) -> np.ndarray | None:
    return None if mask is None else mask_values(mask)


def is_psum(x: Any) -> bool:
    return isinstance(x, Tensor) and x.buffer.kind == "psum"


__all__ = ["psum", "sbuf"]
