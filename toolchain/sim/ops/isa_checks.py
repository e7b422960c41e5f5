"""Shared checks of the less common ``nki.isa`` instructions (``isa_extra``, ``isa_movement``): operand
tiles, layouts, dtypes, ``reduce_cmd`` codes, per-partition columns, row masks.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from nki_agent.toolchain.facts import dtypes
from nki_agent.toolchain.facts.errors import NkiError
from ...location import caller_location
from .. import runtime
from ..tensor import Tensor
from . import common as c
from .isa import _vector_operand

_IDLE, _RESET, _REDUCE, _RESET_REDUCE, _LOAD_REDUCE = 0, 1, 2, 3, 4
_FP32_MIN = float(np.finfo(np.float32).min)
_BITVEC = {"bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "invert"}
_IDENTITY = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}


# ------------------------------------------------------------------------------------ helpers
def _err(code: str, msg: str, *tiles: Any) -> NkiError:
    return NkiError(code, msg, caller_location(), tuple(r for t in tiles if isinstance(t, Tensor) for r in c.where(t)))


def _tile(api: str, name: str, x: Any, psum: bool = True) -> Tensor:
    """An on-chip tile operand (SBUF, or PSUM when the engine can read it); ``dst`` of the new API comes first."""
    if not isinstance(x, Tensor):
        new = name == "dst" and runtime.require(api).generation == runtime.NEW
        first = " (new NKI API: the destination tile is the first argument)" if new else ""
        raise _err("sim_invalid_argument", f"'{name}' of '{api}' must be a tile{first}, got {type(x).__name__}")
    c.require_on_chip(api, name, x, allow_psum=psum)
    return x


def _free(t: Tensor) -> int:
    return t.size // t.shape[0] if t.ndim else 1


def _flat(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0], -1)


def _same_layout(api: str, *named: tuple[str, Any]) -> None:
    """Same partition count and same number of elements per partition."""
    c.check_same_partitions(api, named)
    tiles = [(n, t) for n, t in named if isinstance(t, Tensor)]
    if len({_free(t) for _, t in tiles}) > 1:
        desc = ", ".join(f"{n}{list(t.shape)}" for n, t in tiles)
        raise _err("sim_shape_mismatch", f"operands of '{api}' must have the same number of elements per partition: "
                   f"{desc}", *[t for _, t in tiles])


def _dtype_in(api: str, name: str, t: Any, allowed: tuple[str, ...], what: str = "") -> None:
    if isinstance(t, Tensor) and dtypes.name(t.dtype) not in allowed:
        raise _err("sim_unsupported_dtype", f"'{name}' of '{api}' must be {what or ' / '.join(allowed)}, got "
                   f"{dtypes.name(t.dtype)}", t)


def _same_dtype(api: str, a: Tensor, b: Tensor, an: str = "dst", bn: str = "src") -> None:
    if dtypes.as_dtype(a.dtype) != dtypes.as_dtype(b.dtype):
        raise _err("sim_unsupported_dtype", f"'{an}' dtype {dtypes.name(a.dtype)} of '{api}' must equal '{bn}' dtype "
                   f"{dtypes.name(b.dtype)} (no casting)", a, b)


def _cmd(reduce_cmd: Any) -> int:
    return int(getattr(reduce_cmd, "value", reduce_cmd) or 0)


def _binary_op(api: str, name: str, op: Any, allowed: set[str] | None = None) -> str:
    from .elementwise import BINARY

    n = c.op_name(op)
    if n not in (allowed if allowed is not None else BINARY):
        raise _err("sim_invalid_argument", f"'{name}' of '{api}' must be "
                   f"{'one of ' + ', '.join(sorted(allowed)) if allowed else 'a binary arithmetic operator'}, got '{n}'")
    return n


def _col(api: str, name: str, v: Any, p: int) -> Any:
    """Scalar or (P, 1) operand; a 1-D (P,) view such as ``t[:, k]`` counts as a column too."""
    if isinstance(v, Tensor) and v.ndim == 1 and v.shape[0] == p:
        c.require_on_chip(api, name, v)
        return c.fp32(v).reshape(p, 1)
    return _vector_operand(api, name, v, p)


def _is_zero(v: Any) -> bool:
    return v is None or (not isinstance(v, Tensor) and float(v) == 0.0)


def _rows_mask(mask: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    """Classic ``mask=`` applied to an input tile, flattened to (P, N) (True = element takes part)."""
    m = c.mask_of(mask)
    return None if m is None else _flat(np.broadcast_to(m, shape))


# per-simulation instruction state (keyed by the simulation, dropped with it): the Vector Engine
# accumulator registers of reduce_cmd and the dropout generator
_STATES: dict[int, list[Any]] = {}  # id(simulation) -> [accumulators (P, 1) or None, dropout generator]


def _state(s: runtime.Simulation) -> list[Any]:
    st = _STATES.get(id(s))
    if st is None:
        st = _STATES[id(s)] = [None, np.random.default_rng(0)]
        weakref.finalize(s, _STATES.pop, id(s), None)
    return st
