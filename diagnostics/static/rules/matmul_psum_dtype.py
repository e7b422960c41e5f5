"""New-API ``nisa.nc_matmul`` into a PSUM tile allocated with a non-fp32 dtype on trn1/trn2
(``sim_unsupported_dtype``): TensorE accumulates fp32 in PSUM before gen4 (trn3 also takes bf16). Silent
when the file declares another target (a task's ``TARGET = "trn3"``).

Fix: allocate the PSUM tile as ``nl.float32``. Where the kernel reads ``acc.dtype`` (e.g. to allocate
the SBUF tile it copies the result into), the old dtype is written out, so the copy keeps its dtype.
Offered only when the tile's free size still fits one PSUM bank in fp32 (512 elements).
"""

from __future__ import annotations

import ast
import re

from ..finding import Finding, NodeFix
from ..interp import Event
from ..values import TileV
from .psum_to_hbm import alias_of

CODE = "sim_unsupported_dtype"
KINDS = {"call"}
FP32_ONLY_TARGETS = ("trn1", "trn2")
BANK_FP32 = 512
DECLARED_TARGET = re.compile(r"^TARGET\s*=\s*[\"'](trn\d)[\"']", re.MULTILINE)  # a task file's own target


def check(event: Event, ctx: object) -> list[Finding]:
    f = event.facts
    if getattr(ctx, "generation", "") != "new" or (f["ns"], f["name"]) != ("nisa", "nc_matmul"):
        return []
    target = getattr(ctx, "target", "trn1")
    declared = DECLARED_TARGET.search(getattr(ctx, "text", ""))
    if target not in FP32_ONLY_TARGETS or (declared is not None and declared.group(1) not in FP32_ONLY_TARGETS):
        return []
    dst = f["kwargs"].get("dst", f["args"][0] if f["args"] else None)
    if not (isinstance(dst, TileV) and dst.certain and dst.buffer == "psum" and dst.dtype
            and dst.dtype not in ("float32", "fp32")):
        return []
    return [Finding(CODE, f"nc_matmul accumulates in fp32 PSUM on {target}, but its dst `{dst.name or 'tile'}` is "
                    f"{dst.dtype}; allocate the PSUM tile with dtype=nl.float32 (cast when copying it out)",
                    event.node, fixes=_fix(dst, ctx))]


def _fix(dst: TileV, ctx: object) -> list[NodeFix]:
    alloc, root, statement_of = dst.origin, getattr(ctx, "root", None), getattr(ctx, "statement_of", None)
    text = getattr(ctx, "text", "")
    nl = alias_of(getattr(ctx, "aliases", {}), "nki.language")
    if not isinstance(alloc, ast.Call) or root is None or statement_of is None or not text or nl is None:
        return []
    if dst.shape is None or len(dst.shape) < 2 or any(d is None for d in dst.shape):
        return []
    free = 1
    for d in dst.shape[1:]:
        free *= d  # type: ignore[operator]
    if free > BANK_FP32:
        return []
    dtype_node = next((k.value for k in alloc.keywords if k.arg == "dtype"), None)
    pos = 2 if isinstance(alloc.func, ast.Attribute) and alloc.func.attr == "full" else 1
    if dtype_node is None and len(alloc.args) > pos:
        dtype_node = alloc.args[pos]
    old = ast.get_source_segment(text, dtype_node) if dtype_node is not None else None
    if dtype_node is None or old is None:
        return []
    edits: list[tuple[ast.AST, str]] = [(dtype_node, f"{nl}.float32")]
    stmt = statement_of(alloc)
    if not (isinstance(stmt, ast.Assign) and stmt.value is alloc and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)):
        return []
    var = stmt.targets[0].id
    stores = [n for n in ast.walk(root) if isinstance(n, ast.Name) and n.id == var and not isinstance(n.ctx, ast.Load)]
    if len(stores) != 1:  # rebound elsewhere: `var.dtype` may mean another tensor
        return []
    for n in ast.walk(root):
        if isinstance(n, ast.Attribute) and n.attr == "dtype" and isinstance(n.value, ast.Name) and n.value.id == var:
            edits.append((n, old))
    return [NodeFix("Accumulate the matmul in fp32 PSUM", edits)]
