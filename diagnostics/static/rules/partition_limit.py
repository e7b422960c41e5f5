"""Partition dim > 128 (``err_num_partition_exceed_arch_limit``): an on-chip allocation or a load whose
partition size is a known number above ``nl.tile_size.pmax``. Fix (``diagnostics/tile_split.py``): when the
tile belongs to a straight-line load -> row-local compute -> store block, split the block into a loop over
128-row tiles."""

from __future__ import annotations

import ast

from ...tile_split import split_block
from ..finding import Finding, NodeFix
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
            fixes = _split(event, ctx, p) if f["par_axis"] is None and buffer == "sbuf" else []
            return [Finding(CODE, f"number of partitions {p} exceeds the architecture limit of {PMAX} "
                            f"(dim {axis} of this {buffer.upper()} tensor is the partition dim); split it into tiles of "
                            "nl.tile_size.pmax", event.node, fixes=fixes)]
    elif f["ns"] == "nl" and f["name"] == "load":
        src = f["args"][0] if f["args"] else f["kwargs"].get("src")
        shape = getattr(src, "shape", None)
        if shape and shape[0] is not None and shape[0] > PMAX and len(shape) >= 2:
            return [Finding(CODE, f"nl.load of {shape[0]} rows makes a tile with {shape[0]} partitions, more than "
                            f"{PMAX}; load at most nl.tile_size.pmax rows per tile", event.node,
                            fixes=_split(event, ctx, shape[0]))]
    return []


def _split(event: Event, ctx: object, rows: int) -> list[NodeFix]:
    """The tile-loop rewrite of the block around the flagged statement, when it is provably equivalent."""
    statement_of = getattr(ctx, "statement_of", None)
    root, text = getattr(ctx, "root", None), getattr(ctx, "text", "")
    if statement_of is None or not isinstance(root, (ast.FunctionDef, ast.AsyncFunctionDef)) or not text:
        return []
    stmt = statement_of(event.node)
    if stmt is None:
        return []
    edit = split_block(root, text, stmt, rows, getattr(ctx, "aliases", {}), getattr(ctx, "constants", {}),
                       getattr(ctx, "generation", ""), getattr(ctx, "param_shapes", {}))
    if edit is None:
        return []
    return [NodeFix(f"Split the {rows} partitions into a loop over {PMAX}-row tiles", [edit])]
