"""A TensorE matmul operand in the wrong memory (``err_unsupported_memory``): ``nisa.nc_matmul`` reads its
``stationary`` and ``moving`` tiles from SBUF, in both API generations (the simulator's check, and the
ISA's documented operand placement). Reported only where the code writes it out: the operand is a view of
an allocation with an explicit ``buffer=`` of PSUM or HBM (``nl.ndarray(..., buffer=nl.psum)``) — a
fact no input can change. ``nl.matmul`` accepts PSUM operands and is not checked here."""

from __future__ import annotations

import ast

from ..finding import Finding
from ..interp import Event
from ..values import TileV

CODE = "err_unsupported_memory"
KINDS = {"call"}
WRONG = {"psum": "PSUM", "hbm": "HBM"}


def explicit_buffer(tile: object) -> str | None:
    """``tile``'s buffer when it is a view of an allocation that names it (``buffer=...``), else None."""
    if not isinstance(tile, TileV) or tile.buffer is None or not tile.certain:
        return None
    origin = tile.origin
    if not isinstance(origin, ast.Call) or not any(k.arg == "buffer" for k in origin.keywords):
        return None
    return tile.buffer


def operands(event: Event, generation: str) -> list[tuple[str, object]]:
    """(parameter name, value) of the operands of an ``nc_matmul`` call in this API generation."""
    f = event.facts
    args, kwargs = f["args"], f["kwargs"]
    first = 1 if generation == "new" else 0  # new API: nc_matmul(dst, stationary, moving, ...)
    out = []
    for k, name in enumerate(("stationary", "moving")):
        value = args[first + k] if len(args) > first + k else kwargs.get(name)
        if value is not None:
            out.append((name, value))
    return out


def check(event: Event, ctx: object) -> list[Finding]:
    f = event.facts
    generation = getattr(ctx, "generation", "")
    if f["ns"] != "nisa" or f["name"] != "nc_matmul" or generation not in ("classic", "new"):
        return []
    for name, value in operands(event, generation):
        buffer = explicit_buffer(value)
        if buffer in WRONG:
            label = getattr(value, "name", "") or name
            return [Finding(CODE, f"nisa.nc_matmul reads its {name} operand from SBUF, but `{label}` is allocated "
                            f"in {WRONG[buffer]} (buffer=); allocate it in nl.sbuf (copy a PSUM result out with "
                            "nisa.tensor_copy first)", event.node)]
    return []
