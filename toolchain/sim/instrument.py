"""Instruction boundaries of the trace: one traced instruction per NKI API call the kernel makes.

``instrument(fn, api)`` wraps a namespace function (``language.build``, ``isa_api.build``) so that,
while the running simulation traces (``Simulation.tracer``), the call opens an instruction named
``api`` (``"nl.load"``, ``"nisa.nc_matmul"``) at the kernel line that made it, with the arguments that
change its cost (``attrs_of``); every view read and written inside is one of its operands. Without a
tracer the wrapper costs one context-variable look-up.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

from . import runtime

# keyword arguments whose values are operators / activation functions (their names go into attrs["ops"])
_OP_KEYS = ("op", "op0", "op1", "reduce_op", "act_op", "func")


def kernel_line(sim: runtime.Simulation, depth: int = 2) -> int:
    """The line of the kernel file the current instruction was issued from (0: none in the kernel file)."""
    from ..location import replay_location

    replayed = replay_location()
    if replayed is not None:
        return replayed.line if replayed.path == sim.kernel_file else 0
    f: Any = sys._getframe(depth)
    path = sim.kernel_file
    for _ in range(12):
        if f is None:
            return 0
        if f.f_code.co_filename == path:
            return int(f.f_lineno)
        f = f.f_back
    return 0


def _name(v: Any) -> str:
    op = getattr(v, "__nki_op__", None)
    if op:
        return str(op)
    return str(getattr(v, "__name__", None) or getattr(v, "name", None) or v)


def attrs_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The cost-relevant arguments of a call: operator names, engine, dtype, flags."""
    from .tensor import Tensor

    out: dict[str, Any] = {}
    ops = [_name(a) for a in args if callable(a) and not isinstance(a, (Tensor, type))]
    for k, v in kwargs.items():
        if v is None or isinstance(v, Tensor):
            continue
        if k in _OP_KEYS and callable(v):
            ops.append(_name(v))
        elif k == "engine":
            out["engine"] = _name(v).rsplit(".", 1)[-1]
        elif k == "dtype":
            out["dtype"] = getattr(v, "__name__", None) or str(getattr(v, "name", v))
        elif isinstance(v, (bool, int, float, str)):
            out[k] = v
        elif hasattr(v, "name") and hasattr(v, "value"):  # an enum (perf_mode, reduce_cmd, ...)
            out[k] = str(v.name)
    if ops:
        out["ops"] = tuple(ops)
    return out


def instrument(fn: Callable[..., Any], api: str) -> Callable[..., Any]:
    """``fn`` as one traced instruction named ``api`` (attributes such as ``__nki_op__`` kept)."""

    @functools.wraps(fn)
    def traced(*args: Any, **kwargs: Any) -> Any:
        sim = runtime.current()
        tr = sim.tracer if sim is not None else None
        if tr is None:
            return fn(*args, **kwargs)
        assert sim is not None
        if tr.depth:
            return fn(*args, **kwargs)  # inside another instruction (a sub-call): part of it
        tr.begin(api, kernel_line(sim), attrs_of(args, kwargs))
        try:
            out = fn(*args, **kwargs)
        except BaseException:
            tr.abort()
            raise
        tr.end()
        return out

    traced.__nki_traced__ = True  # type: ignore[attr-defined]
    return traced


def traced_region(api: str, depth: int = 3) -> tuple[Any, bool]:
    """Open an instruction for a tile operator / assignment (``tensor.py``); returns (tracer, opened)."""
    sim = runtime.current()
    tr = sim.tracer if sim is not None else None
    if tr is None or tr.depth:
        if tr is not None:
            tr.depth += 1
        return tr, False
    assert sim is not None
    tr.begin(api, kernel_line(sim, depth), {})
    return tr, True
