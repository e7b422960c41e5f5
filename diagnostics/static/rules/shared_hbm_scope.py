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
    """Move the allocating statement (with its comment) to just above the outermost loop."""
    statement_of = getattr(ctx, "statement_of", None)
    text = getattr(ctx, "text", "")
    if statement_of is None or not text:
        return []
    stmt = statement_of(event.node)
    outer = event.facts["loops"][0][1]
    if not isinstance(stmt, ast.Assign) or stmt.end_lineno is None or outer.end_lineno is None:
        return []
    lines = text.split("\n")
    moved = lines[stmt.lineno - 1: stmt.end_lineno]
    loop = lines[outer.lineno - 1: outer.end_lineno]
    body = [line for k, line in enumerate(loop, outer.lineno) if not stmt.lineno <= k <= stmt.end_lineno]
    if len(body) < 2:  # the loop would be left empty
        return []
    shift = len(moved[0]) - len(moved[0].lstrip()) - outer.col_offset
    hoisted = [m[shift:] if m[:shift].strip() == "" else m for m in moved]
    new = "\n".join(h.lstrip() if i == 0 else h for i, h in enumerate(hoisted)) + "\n" + \
        "\n".join(body)
    return [NodeFix("Hoist the shared_hbm allocation out of the loop", [(_LoopSpan(outer, len(loop[-1])), new)])]


class _LoopSpan(ast.AST):
    """The loop's full lines (to the end of its last line, comments included)."""

    def __init__(self, loop: ast.stmt, last_line_len: int) -> None:
        super().__init__()
        self.lineno = loop.lineno
        self.col_offset = loop.col_offset
        self.end_lineno = loop.end_lineno
        self.end_col_offset = last_line_len
