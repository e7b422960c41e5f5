"""TensorE operand limits on known shapes: contraction and stationary free <= 128, moving free <= 512
(``sim_matmul_operand_limit``); only for the classic ``nisa.nc_matmul(stationary, moving)`` and new
``nisa.nc_matmul(dst, stationary, moving)`` forms and ``nl.matmul(x, y, transpose_x=True)``."""

from __future__ import annotations

from ..finding import Finding
from ..interp import Event
from ..values import TileV

CODE = "sim_matmul_operand_limit"
KINDS = {"call"}
STATIONARY_FMAX = 128  # PE array rows
MOVING_FMAX = 512  # one PSUM bank of fp32 on trn1/trn2 (trn3 allows more: not reported)
PMAX = 128


def _shape(v: object) -> tuple[int | None, ...] | None:
    return v.shape if isinstance(v, TileV) and v.shape is not None and len(v.shape) == 2 else None


def check(event: Event, ctx: object) -> list[Finding]:
    f = event.facts
    args = f["args"]
    if f["ns"] == "nisa" and f["name"] == "nc_matmul":
        ops = args[1:3] if getattr(ctx, "generation", "") == "new" else args[:2]
        stationary = _shape(ops[0]) if len(ops) > 0 else _shape(f["kwargs"].get("stationary"))
        moving = _shape(ops[1]) if len(ops) > 1 else _shape(f["kwargs"].get("moving"))
    elif f["ns"] == "nl" and f["name"] == "matmul" and getattr(f["kwargs"].get("transpose_x"), "value", None) == 1:
        stationary = _shape(args[0]) if args else None
        moving = _shape(args[1]) if len(args) > 1 else None
    else:
        return []
    out: list[Finding] = []
    if stationary and stationary[1] is not None and stationary[1] > STATIONARY_FMAX:
        out.append(Finding(CODE, f"stationary free size {stationary[1]} exceeds {STATIONARY_FMAX} "
                           "(tile_size.gemm_stationary_fmax); split M into tiles of 128", event.node))
    if moving and moving[1] is not None and moving[1] > MOVING_FMAX and getattr(ctx, "target", "trn1") != "trn3":
        out.append(Finding(CODE, f"moving free size {moving[1]} exceeds {MOVING_FMAX} (tile_size.gemm_moving_fmax, "
                           "one PSUM bank of fp32); split N into tiles of 512", event.node))
    for label, shp in (("stationary", stationary), ("moving", moving)):
        if shp and shp[0] is not None and shp[0] > PMAX:
            out.append(Finding(CODE, f"{label} contraction (partition) size {shp[0]} exceeds {PMAX}", event.node))
    return out[:1]
