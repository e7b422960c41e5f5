"""``shared_hbm`` tensor created inside a loop or branch of a classic kernel
(``err_shared_hbm_must_in_kernel_level``). Fix: hoist the allocation above the outermost loop."""

from __future__ import annotations

import ast

from ..finding import Finding, NodeFix
from ..interp import Event

CODE = "err_shared_hbm_must_in_kernel_level"
KINDS = {"alloc"}


def check(event: Event, ctx: object) -> list[Finding]:
    f = event.facts
    # static_range (and plain range) loops are unrolled at trace time; published kernels allocate there
    if not f["shared"] or getattr(ctx, "generation", "") != "classic" or not any(
            kind in ("affine_range", "sequential_range") for kind, _ in f["loops"]):
        return []
    return [Finding(CODE, "shared_hbm tensors can only be created at the top level of the kernel, not inside a "
                    "loop; create it before the loop", event.node, fixes=_hoist(event, ctx))]


def _hoist(event: Event, ctx: object) -> list[NodeFix]:
    """Move ``name = nl.ndarray(..., buffer=nl.shared_hbm)`` to just above the outermost loop."""
    statement_of = getattr(ctx, "statement_of", None)
    segment = getattr(ctx, "segment", None)
    if statement_of is None or segment is None:
        return []
    stmt = statement_of(event.node)
    outer = event.facts["loops"][0][1]
    if not isinstance(stmt, ast.Assign) or stmt.lineno == outer.lineno:
        return []
    text = segment(stmt)
    if text is None or "\n" in text:
        return []
    indent = " " * outer.col_offset
    loop_text = segment(outer)
    if loop_text is None:
        return []
    # one edit on the loop: prefix the hoisted statement, and drop it from inside the body
    new_loop = loop_text.replace(text + "\n", "", 1) if text + "\n" in loop_text else None
    if new_loop is None:
        return []
    new_loop = _drop_blank(new_loop, text)
    return [NodeFix("Hoist the shared_hbm allocation out of the loop", [(outer, f"{text}\n{indent}{new_loop}")])]


def _drop_blank(loop_text: str, removed: str) -> str:
    lines = loop_text.split("\n")
    return "\n".join(line for line in lines if line.strip() or not line)
