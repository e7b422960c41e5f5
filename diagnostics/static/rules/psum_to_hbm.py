"""New-API ``nl.store`` / ``nisa.dma_copy`` reading a PSUM tile (``err_unsupported_memory``): DMA cannot
read PSUM, the data must go through SBUF. Reported when the source is statically a PSUM tile (allocated
with ``buffer=nl.psum``). Fix: allocate an SBUF tile, ``nisa.tensor_copy`` into it, store that.

``copy_out_edits`` is shared with ``sim_fixes`` (the same repair when only the simulator knew the buffer).
"""

from __future__ import annotations

import ast

from ..finding import Finding, NodeFix
from ..interp import Event
from ..values import TileV

CODE = "err_unsupported_memory"
KINDS = {"call"}


def source_of(call: ast.Call, api: tuple[str, str]) -> ast.expr | None:
    """The expression a store/DMA reads: ``nl.store(dst, value)``, ``nisa.dma_copy(dst, src)``."""
    key, pos = ("value", 1) if api == ("nl", "store") else ("src", 1)
    for k in call.keywords:
        if k.arg == key:
            return k.value
    if len(call.args) > pos and not any(isinstance(a, ast.Starred) for a in call.args[: pos + 1]):
        return call.args[pos]
    return None


def alias_of(aliases: dict[str, str], module: str) -> str | None:
    """The local name bound to ``module`` (e.g. ``nl`` for ``nki.language``), shortest first."""
    names = sorted((a for a, q in aliases.items() if q == module and a.isidentifier()), key=len)
    return names[0] if names else None


def fresh_name(base: str, root: ast.AST) -> str:
    taken = {n.id for n in ast.walk(root) if isinstance(n, ast.Name)} | \
        {n.arg for n in ast.walk(root) if isinstance(n, ast.arg)}
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}{k}"
    return name


def char_offset(text: str, lineno: int, byte_col: int) -> int:
    """Character offset in ``text`` of an AST position (1-based line, UTF-8 byte column)."""
    lines = text.split("\n")
    before = sum(len(x) + 1 for x in lines[: lineno - 1])
    line = lines[lineno - 1] if 0 < lineno <= len(lines) else ""
    return before + len(line.encode("utf-8")[:byte_col].decode("utf-8", "ignore"))


def span_of(text: str, node: ast.AST) -> tuple[int, int]:
    line: int = getattr(node, "lineno", 1)
    start = char_offset(text, line, getattr(node, "col_offset", 0))
    end = char_offset(text, getattr(node, "end_lineno", None) or line, getattr(node, "end_col_offset", None) or 0)
    return start, end


def prefixed(stmt: ast.stmt, text: str, lines: list[str], replace: tuple[ast.AST, str] | None = None) -> str:
    """Text replacing ``stmt``: ``lines`` at the statement's indentation, then the statement itself (with one
    sub-expression optionally replaced). Every line is non-blank, so the engine can re-indent it."""
    s0, s1 = span_of(text, stmt)
    body = text[s0:s1]
    if replace is not None:
        a0, a1 = span_of(text, replace[0])
        body = text[s0:a0] + replace[1] + text[a1:s1]
    pad = " " * stmt.col_offset
    return "".join(f"{line}\n{pad}" for line in lines) + body


def copy_out_edits(stmt: ast.stmt, src: ast.expr, text: str, root: ast.AST, nl: str,
                   nisa: str) -> list[tuple[ast.AST, str]] | None:
    """Insert ``tmp = nl.ndarray(src.shape, ...sbuf); nisa.tensor_copy(tmp, src)`` before ``stmt``, read ``tmp``."""
    seg = ast.get_source_segment(text, src)
    if seg is None or "\n" in seg or not isinstance(stmt, ast.Expr):
        return None
    base = src
    while isinstance(base, ast.Subscript):
        base = base.value
    tmp = fresh_name(f"{base.id}_sbuf" if isinstance(base, ast.Name) else "psum_sbuf", root)
    lines = [f"{tmp} = {nl}.ndarray({seg}.shape, dtype={seg}.dtype, buffer={nl}.sbuf)",
             f"{nisa}.tensor_copy({tmp}, {seg})"]
    return [(stmt, prefixed(stmt, text, lines, (src, tmp)))]


def check(event: Event, ctx: object) -> list[Finding]:
    f = event.facts
    api = (f["ns"], f["name"])
    if getattr(ctx, "generation", "") != "new" or api not in (("nl", "store"), ("nisa", "dma_copy")):
        return []
    src_v = f["kwargs"].get("value" if api == ("nl", "store") else "src",
                            f["args"][1] if len(f["args"]) > 1 else None)
    if not (isinstance(src_v, TileV) and src_v.certain and src_v.buffer == "psum"):
        return []
    label = "nl.store" if api == ("nl", "store") else "nisa.dma_copy"
    return [Finding(CODE, f"{label} cannot read PSUM in the new NKI API (DMA reads SBUF or HBM); copy the tile to "
                    "SBUF with nisa.tensor_copy first", event.node, fixes=_fix(event, ctx, api))]


def _fix(event: Event, ctx: object, api: tuple[str, str]) -> list[NodeFix]:
    statement_of = getattr(ctx, "statement_of", None)
    text, root = getattr(ctx, "text", ""), getattr(ctx, "root", None)
    aliases = getattr(ctx, "aliases", {})
    nl, nisa = alias_of(aliases, "nki.language"), alias_of(aliases, "nki.isa")
    node = event.node
    if statement_of is None or root is None or not text or nl is None or nisa is None or not isinstance(node, ast.Call):
        return []
    stmt = statement_of(node)
    src = source_of(node, api)
    if stmt is None or src is None or not (isinstance(stmt, ast.Expr) and stmt.value is node):
        return []
    edits = copy_out_edits(stmt, src, text, root, nl, nisa)
    return [NodeFix("Copy the PSUM tile to SBUF before the DMA", edits)] if edits else []
