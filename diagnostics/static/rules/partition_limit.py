"""Partition dim > 128 (``err_num_partition_exceed_arch_limit``): an on-chip allocation or a load whose
partition size is a known number above ``nl.tile_size.pmax``."""

from __future__ import annotations

from ..finding import Finding
from ..interp import Event

CODE = "err_num_partition_exceed_arch_limit"
KINDS = {"alloc", "call"}
PMAX = 128  # partitions on every NeuronCore generation


def check(event: Event, ctx: object) -> list[Finding]:
    f = event.facts
    if event.kind == "alloc":
        shape, buffer = f["shape"], f["buffer"]
        if buffer not in ("sbuf", "psum") or not shape:
            return []
        axis = f["par_axis"] or 0
        p = shape[axis] if axis < len(shape) else None
        if p is not None and p > PMAX:
            return [Finding(CODE, f"number of partitions {p} exceeds the architecture limit of {PMAX} "
                            f"(dim {axis} of this {buffer.upper()} tensor is the partition dim); split it into tiles of "
                            "nl.tile_size.pmax", event.node)]
    elif f["ns"] == "nl" and f["name"] == "load":
        src = f["args"][0] if f["args"] else f["kwargs"].get("src")
        shape = getattr(src, "shape", None)
        if shape and shape[0] is not None and shape[0] > PMAX and len(shape) >= 2:
            return [Finding(CODE, f"nl.load of {shape[0]} rows makes a tile with {shape[0]} partitions, more than "
                            f"{PMAX}; load at most nl.tile_size.pmax rows per tile", event.node)]
    return []
