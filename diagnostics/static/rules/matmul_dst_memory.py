"""A new-API ``nisa.nc_matmul(dst, ...)`` whose result tile is not in PSUM (``sim_matmul_psum_placement``):
TensorE writes matmul results into PSUM only. Reported only where the code writes it out: ``dst`` is a
view of an allocation with an explicit ``buffer=`` of SBUF or HBM. (A classic ``nc_matmul`` returns its
PSUM tile; assigning it into an SBUF tile is a copy, not this mistake.) The message names ``dst`` as the
file writes it. Fix, outside loops only (inside one, successive matmuls into ``dst`` may be meant to
accumulate): the matmul writes a fresh PSUM tile, then ``nisa.tensor_copy`` copies it into ``dst``."""

from __future__ import annotations

import ast

from ..finding import Finding, NodeFix
from ..interp import Event
from .matmul_operand_memory import explicit_buffer
from .psum_to_hbm import alias_of, fresh_name, prefixed

CODE = "sim_matmul_psum_placement"
KINDS = {"call"}
WRONG = {"sbuf": "SBUF", "hbm": "HBM"}


def dst_node(call: ast.AST) -> ast.expr | None:
    """The ``dst`` argument of an ``nc_matmul(dst, ...)`` call as written."""
    if not isinstance(call, ast.Call):
        return None
    for k in call.keywords:
        if k.arg == "dst":
            return k.value
    return call.args[0] if call.args and not isinstance(call.args[0], ast.Starred) else None


def check(event: Event, ctx: object) -> list[Finding]:
    f = event.facts
    if f["ns"] != "nisa" or f["name"] != "nc_matmul" or getattr(ctx, "generation", "") != "new":
        return []
    dst = f["args"][0] if f["args"] else f["kwargs"].get("dst")
    buffer = explicit_buffer(dst)
    if buffer not in WRONG:
        return []
    node = dst_node(event.node)
    label = ast.unparse(node) if node is not None else getattr(dst, "name", "") or "dst"
    return [Finding(CODE, f"nisa.nc_matmul writes its result to PSUM, but its dst `{label}` is allocated in "
                    f"{WRONG[buffer]} (buffer=); allocate it with buffer=nl.psum and copy it to SBUF "
                    "(nisa.tensor_copy) before storing it", event.node, fixes=_fix(event, ctx, node))]


def _fix(event: Event, ctx: object, dst: ast.expr | None) -> list[NodeFix]:
    statement_of = getattr(ctx, "statement_of", None)
    text, root = getattr(ctx, "text", ""), getattr(ctx, "root", None)
    aliases = getattr(ctx, "aliases", {})
    nl, nisa = alias_of(aliases, "nki.language"), alias_of(aliases, "nki.isa")
    call = event.node
    if statement_of is None or root is None or not text or nl is None or nisa is None or dst is None \
            or event.facts["loops"]:
        return []
    stmt = statement_of(call)
    seg = ast.get_source_segment(text, dst)
    if stmt is None or seg is None or "\n" in seg or not (isinstance(stmt, ast.Expr) and stmt.value is call):
        return []
    base = dst
    while isinstance(base, ast.Subscript):
        base = base.value
    tmp = fresh_name(f"{base.id}_psum" if isinstance(base, ast.Name) else "matmul_psum", root)
    body = prefixed(stmt, text, [f"{tmp} = {nl}.ndarray({seg}.shape, dtype={nl}.float32, buffer={nl}.psum)"],
                    (dst, tmp))
    body += f"\n{' ' * stmt.col_offset}{nisa}.tensor_copy({seg}, {tmp})"
    return [NodeFix("Write the matmul result to a PSUM tile, then copy it into " + seg, [(stmt, body)])]
