"""An on-chip tile indexed by ``nl.arange(N)[:, None]`` with a literal ``N`` above 128 as its partition index
(``err_tensor_access_out_of_bound``): a tile in SBUF or PSUM has at most 128 partitions (a bigger one is
flagged where it is allocated), so an index spanning ``N`` partitions is out of bounds whatever the inputs.

Only the written-out form is checked: the partition index is, directly or through a variable, exactly
``nl.arange(<int literal>)[:, None]`` (no arithmetic on it), the subscript is 2-D, and
the access carries no ``mask=`` (a mask may cut the range down). HBM tensors are left to the load/store
checks (``partition_limit``)."""

from __future__ import annotations

import ast

from ..finding import Finding
from ..interp import Event
from ..values import IndexV

CODE = "err_tensor_access_out_of_bound"
KINDS = {"subscript"}
PMAX = 128


def arange_extent(node: ast.AST | None) -> int | None:
    """``N`` of ``nl.arange(N)[:, None]`` with ``N`` an int literal, else None (a name may be rebound locally)."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) == 2):
        return None
    axis, none = node.slice.elts
    if not (isinstance(axis, ast.Slice) and axis.lower is None and axis.upper is None and axis.step is None
            and isinstance(none, ast.Constant) and none.value is None):
        return None
    call = node.value
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "arange"
            and len(call.args) == 1 and not call.keywords):
        return None
    arg = call.args[0]
    return arg.value if isinstance(arg, ast.Constant) and type(arg.value) is int else None


def _masked(event: Event, ctx: object) -> bool:
    parents = getattr(ctx, "parents", None)
    cur: ast.AST | None = event.node
    while cur is not None and not isinstance(cur, ast.stmt) and parents is not None:
        if isinstance(cur, ast.Call) and any(k.arg == "mask" for k in cur.keywords):
            return True
        cur = parents.get(id(cur))
    return parents is None  # no parent map: cannot rule a mask out


def check(event: Event, ctx: object) -> list[Finding]:
    tile = event.facts["tile"]
    values = event.facts["index_values"]
    if tile.buffer not in ("sbuf", "psum") or not tile.certain or len(values) != 2 or tile.is_param:
        return []
    first = values[0]
    if not isinstance(first, IndexV) or getattr(first, "grid", False):
        return []
    n = arange_extent(first.origin)
    if n is None or n <= PMAX or getattr(tile, "par_axis", 0) != 0 or _masked(event, ctx):
        return []
    if hasattr(first, "shape") and (first.shape is None or first.shape[0] != n):
        return []  # the value is not that arange everywhere (branches joined): the origin is one of several
    return [Finding(CODE, f"the partition index nl.arange({n})[:, None] spans {n} partitions, but a tile in "
                    f"{tile.buffer.upper()} has at most {PMAX} (nl.tile_size.pmax); index at most 128 rows per "
                    "tile", event.node)]
