"""Where each mutation operator of the suite (``mutations.py``) can inject its bug in one kernel.

``Source`` is one kernel file (text, AST, API generation, local names of ``nki.language`` / ``nki.isa``)
with the text surgery the operators share; each public function here lists an operator's ``Site``s —
the mutated text, the line of the bug and a description — in source order.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

BAD_PARTITIONS = "256"  # the classic "tile of 256 rows" mistake: twice nl.tile_size.pmax
REDUCTIONS = {"max", "min", "sum", "mean", "prod", "tensor_reduce"}  # calls whose axis= picks the reduced axis
ACTIVATION_SWAP = {"gelu": "silu", "silu": "gelu", "relu": "gelu", "rsqrt": "sqrt"}  # plausible confusions
NON_COMMUTATIVE = {"subtract", "divide"}  # element-wise ops whose operand order matters


@dataclass(frozen=True)
class Site:
    line: int
    text: str
    description: str


class Source:
    """One kernel file: text, AST, API generation and the local names of ``nki.language`` / ``nki.isa``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tree = ast.parse(text)
        self.lines = text.splitlines(keepends=True)
        self.starts = [0, *itertools.accumulate(len(line) for line in self.lines)]
        mods = [(a.name, a.asname or a.name) for n in self.tree.body if isinstance(n, ast.Import) for a in n.names]
        mods += [(f"{n.module}.{a.name}", a.asname or a.name) for n in self.tree.body
                 if isinstance(n, ast.ImportFrom) and n.module for a in n.names]
        self.generation = "classic" if any(m.startswith("neuronxcc") for m, _ in mods) else "new"
        self.nl = next((local for m, local in mods if m.endswith(".language")), "nl")
        self.nisa = next((local for m, local in mods if m.endswith(".isa")), "nisa")
        self.parents = {id(c): p for p in ast.walk(self.tree) for c in ast.iter_child_nodes(p)}

    def offset(self, line: int, col: int) -> int:
        return self.starts[line - 1] + len(self.lines[line - 1].encode("utf-8")[:col].decode("utf-8", "ignore"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        pos = [getattr(node, k) for k in ("lineno", "col_offset", "end_lineno", "end_col_offset")]
        return self.offset(pos[0], pos[1]), self.offset(pos[2], pos[3])

    def seg(self, node: ast.AST) -> str:
        a, b = self.span(node)
        return self.text[a:b]

    def lines_of(self, stmt: ast.stmt) -> tuple[int, int]:
        """Span of the whole lines of a statement (a deletion that leaves no blank line)."""
        return self.starts[stmt.lineno - 1], self.starts[stmt.end_lineno or stmt.lineno]

    def nodes(self, kind: type[ast.AST] | tuple[type[ast.AST], ...]) -> list[Any]:
        found = [n for n in ast.walk(self.tree) if isinstance(n, kind) and hasattr(n, "lineno")]
        return sorted(found, key=lambda n: (n.lineno, n.col_offset))

    def site(self, edits: list[tuple[int, int, str]], anchor: int, description: str) -> Site:
        """Apply char-offset edits; ``anchor`` (an offset in the original) becomes the mutant's line."""
        text = self.text
        for a, b, new in sorted(edits, reverse=True):
            text = text[:a] + new + text[b:]
        shifted = anchor + sum(len(new) - (b - a) for a, b, new in edits if a < anchor)
        return Site(text.count("\n", 0, shifted) + 1, text, description)

    def swap(self, node: ast.AST, new: str, description: str) -> Site:
        a, b = self.span(node)
        return self.site([(a, b, new)], a, description)

    def delete(self, stmt: ast.stmt) -> tuple[int, int, str]:
        a, b = self.lines_of(stmt)
        body = getattr(self.parents.get(id(stmt)), "body", None)
        if isinstance(body, list) and body == [stmt]:
            return a, b, " " * stmt.col_offset + "pass\n"  # the block must keep a statement
        return a, b, ""


def _qual(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join(([node.id] if isinstance(node, ast.Name) else ["?"]) + parts[::-1])


def _is_call(node: ast.AST, module: str, names: Iterable[str]) -> bool:
    return isinstance(node, ast.Call) and _qual(node.func) in {f"{module}.{n}" for n in names}


def _arg(call: ast.Call, index: int, keyword: str) -> ast.expr | None:
    kw = next((k.value for k in call.keywords if k.arg == keyword), None)
    return kw if kw is not None else call.args[index] if len(call.args) > index else None


def _root(node: ast.AST | None) -> str | None:
    while isinstance(node, (ast.Subscript, ast.Attribute, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _allocs(src: Source, buffer: str) -> dict[str, list[ast.Assign]]:
    """``name = nl.ndarray/zeros(..., buffer=nl.<buffer>)`` assignments, by name."""
    out: dict[str, list[ast.Assign]] = {}
    for node in src.nodes(ast.Assign):
        if (len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and _is_call(node.value, src.nl, ("ndarray", "zeros", "ones", "full"))
                and _qual(_arg(node.value, 99, "buffer") or ast.Constant(None)) == f"{src.nl}.{buffer}"):
            out.setdefault(node.targets[0].id, []).append(node)
    return out


# -- quick-fix family -------------------------------------------------------------------------------------
def bool_and(src: Source) -> list[Site]:
    out = []
    for kw in src.nodes(ast.keyword):
        v = kw.value
        if kw.arg == "mask" and isinstance(v, ast.Compare) and len(v.ops) == 1 and isinstance(v.ops[0], ast.Lt):
            left, right = src.seg(v.left), src.seg(v.comparators[0])
            out.append(src.swap(v, f"({left} >= 0) and ({left} < {right})",
                                f"mask `{src.seg(v)}` made two-sided with `and` instead of `&`"))
    return out


def arange_1d(src: Source) -> list[Site]:
    return [src.swap(n, src.seg(n.value), f"`{src.seg(n)}` written as a 1-D `{src.seg(n.value)}`")
            for n in src.nodes(ast.Subscript) if _is_call(n.value, src.nl, ("arange",))]


def drop_store(src: Source) -> list[Site]:
    hbm = set(_allocs(src, "shared_hbm"))
    writes = [s for s in src.nodes(ast.Expr) if _is_call(s.value, src.nl, ("store",))
              or (_is_call(s.value, src.nisa, ("dma_copy",)) and _root(_arg(s.value, 0, "dst")) in hbm)]
    return [src.site([src.delete(w)], src.lines_of(w)[0], f"final output write `{src.seg(w)}` removed")
            for w in writes[-1:]]


def psum_bf16(src: Source) -> list[Site]:
    accs = {n.target.id for n in src.nodes(ast.AugAssign) if isinstance(n.target, ast.Name)
            and (_is_call(n.value, src.nisa, ("nc_matmul",)) or _is_call(n.value, src.nl, ("matmul",)))}
    accs |= {_root(_arg(c, 0, "dst")) for c in src.nodes(ast.Call) if _is_call(c, src.nisa, ("nc_matmul",))
             and src.generation == "new"} - {None}  # type: ignore[arg-type]
    out = []
    for name, assigns in _allocs(src, "psum").items():
        for a in assigns if name in accs else []:
            dtype = _arg(a.value, 1, "dtype")  # type: ignore[arg-type]
            if dtype is not None and _qual(dtype) == f"{src.nl}.float32":
                out.append(src.swap(dtype, f"{src.nl}.bfloat16", f"matmul accumulator `{name}` in PSUM as bf16"))
    return sorted(out, key=lambda s: s.line)


def shared_hbm_in_loop(src: Source) -> list[Site]:
    out, outputs = [], [id(a) for v in _allocs(src, "shared_hbm").values() for a in v]
    for fn in src.nodes(ast.FunctionDef):
        for i, stmt in enumerate(fn.body):
            if id(stmt) not in outputs or stmt.end_lineno != stmt.lineno:
                continue
            loop = next((s for s in fn.body[i + 1:] if isinstance(s, ast.For)), None)
            if loop is None:
                continue
            first = loop.body[0]
            at = src.starts[first.lineno - 1]
            moved = " " * first.col_offset + src.lines[stmt.lineno - 1].lstrip()
            out.append(src.site([(*src.lines_of(stmt), ""), (at, at, moved)], at,
                                f"output allocation `{src.seg(stmt)}` moved into the `{src.seg(loop.target)}` loop"))
    return out


def partition_256(src: Source) -> list[Site]:
    out = []
    for a in src.nodes(ast.Assign):
        v = a.value
        if len(a.targets) == 1 and isinstance(a.targets[0], ast.Name) and (
                _qual(v).endswith("tile_size.pmax") or (isinstance(v, ast.Constant) and v.value == 128)):
            out.append(src.swap(v, BAD_PARTITIONS, f"partition tile size `{a.targets[0].id}` 128 -> 256"))
    return out


def _dma_src(src: Source, stmt: ast.stmt) -> ast.expr | None:
    """The source operand of a statement ``nisa.dma_copy(dst, src)`` / ``nl.store(dst, value)``."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return None
    if _is_call(stmt.value, src.nisa, ("dma_copy",)):
        return _arg(stmt.value, 1, "src")
    return _arg(stmt.value, 1, "value") if _is_call(stmt.value, src.nl, ("store",)) else None


def psum_store(src: Source) -> list[Site]:
    if src.generation != "new":
        return []  # classic nl.store accepts a PSUM tile (the compiler inserts the copy)
    psum, sbuf = _allocs(src, "psum"), _allocs(src, "sbuf")
    out = []
    for copy in src.nodes(ast.Expr):
        if not _is_call(copy.value, src.nisa, ("tensor_copy",)):
            continue
        dst, psum_src = _arg(copy.value, 0, "dst"), _arg(copy.value, 1, "src")
        if not (isinstance(dst, ast.Name) and isinstance(psum_src, ast.Name) and psum_src.id in psum):
            continue
        body = getattr(src.parents[id(copy)], "body", [])
        later = [(s, _dma_src(src, s)) for s in body[body.index(copy) + 1:]]
        dma, moved = next(((s, m) for s, m in later if isinstance(m, ast.Name) and m.id == dst.id), (None, None))
        if dma is None or moved is None:
            continue
        edits = [src.delete(copy), (*src.span(moved), psum_src.id)]
        prev = body[body.index(copy) - 1] if body.index(copy) else None
        if prev is not None and any(prev is a for a in sbuf.get(dst.id, [])):
            edits.append(src.delete(prev))  # the SBUF tile only existed for the copy
        out.append(src.site(edits, src.lines_of(dma)[0],
                            f"PSUM tile `{psum_src.id}` DMA'd to HBM without the copy to SBUF"))
    return out


def classic_import(src: Source) -> list[Site]:
    if src.generation != "new":
        return []
    edits = []
    for node in src.tree.body:
        if isinstance(node, ast.Import) and all(a.name.split(".")[0] == "nki" for a in node.names):
            names = ", ".join(f"neuronxcc.{a.name} as {a.asname or a.name}" for a in node.names)
            edits.append((*src.span(node), f"import {names}"))
    return [src.site(edits, min(e[0] for e in edits), "new-API kernel importing the classic `neuronxcc.nki`")] \
        if edits else []


# -- logic family -----------------------------------------------------------------------------------------
def _minus_one(src: Source, node: ast.expr) -> str:
    text = src.seg(node)
    simple = isinstance(node, (ast.Name, ast.Constant, ast.Call, ast.Attribute, ast.Subscript)) or (
        isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)))
    return f"{text} - 1" if simple else f"({text}) - 1"


def off_by_one(src: Source) -> list[Site]:
    out = []
    for n in src.nodes((ast.Slice, ast.Call)):
        bound = n.upper if isinstance(n, ast.Slice) else n.args[0] if (
            _is_call(n, src.nl, ("arange",)) and n.args) else None
        if bound is not None:
            out.append(src.swap(bound, _minus_one(src, bound), f"bound `{src.seg(bound)}` off by one (inclusive)"))
    return out


def swap_operands(src: Source) -> list[Site]:
    out = []
    for c in src.nodes(ast.Call):
        pair: tuple[ast.expr, ast.expr] | None = None
        if _is_call(c, src.nl, NON_COMMUTATIVE | {"matmul"}) and len(c.args) >= 2:
            pair = c.args[0], c.args[1]
        elif _is_call(c, src.nisa, ("nc_matmul",)):
            first = 1 if src.generation == "new" else 0
            if len(c.args) >= first + 2:
                pair = c.args[first], c.args[first + 1]
        elif _is_call(c, src.nisa, ("tensor_tensor",)) and _qual(_arg(c, 99, "op") or c) in {
                f"{src.nl}.{o}" for o in NON_COMMUTATIVE}:
            d1, d2 = _arg(c, 99, "data1"), _arg(c, 99, "data2")
            pair = (d1, d2) if d1 is not None and d2 is not None else None
        if pair is not None:
            (a1, b1), (a2, b2) = src.span(pair[0]), src.span(pair[1])
            x, y = src.seg(pair[0]), src.seg(pair[1])
            out.append(src.site([(a1, b1, y), (a2, b2, x)], src.starts[c.lineno - 1],
                                f"operands `{x}` and `{y}` of `{_qual(c.func)}` swapped"))
    return out


def reduce_axis(src: Source) -> list[Site]:
    out = []
    for c in src.nodes(ast.Call):
        axis = _arg(c, 99, "axis")
        if (_is_call(c, src.nl, REDUCTIONS) or _is_call(c, src.nisa, REDUCTIONS)) and isinstance(
                axis, ast.Constant) and axis.value == 1:
            out.append(src.swap(axis, "0", f"`{_qual(c.func)}` reduces the partition axis (axis=0) instead of axis=1"))
    return out


def wrong_activation(src: Source) -> list[Site]:
    out = []
    for n in src.nodes(ast.Attribute):
        parent = src.parents.get(id(n))
        used = (isinstance(parent, ast.Call) and parent.func is n) or (isinstance(parent, ast.keyword)
                                                                        and parent.arg == "op")
        if used and isinstance(n.value, ast.Name) and n.value.id == src.nl and n.attr in ACTIVATION_SWAP:
            new = f"{src.nl}.{ACTIVATION_SWAP[n.attr]}"
            out.append(src.swap(n, new, f"`{src.seg(n)}` replaced by `{new}`"))
    return out


def drop_scale(src: Source) -> list[Site]:
    out = []
    for n in src.nodes((ast.BinOp, ast.keyword)):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) and isinstance(n.left, ast.Constant) \
                and n.left.value == 1:
            out.append(src.swap(n, "1.0", f"scale factor `{src.seg(n)}` dropped"))
        elif isinstance(n, ast.keyword) and n.arg == "scale" and not isinstance(n.value, ast.Constant):
            call = src.parents[id(n)]
            items = sorted([*call.args, *call.keywords], key=lambda x: (x.lineno, x.col_offset))  # type: ignore[attr-defined]
            before = items[items.index(n) - 1]
            out.append(src.site([(src.span(before)[1], src.span(n)[1], "")], src.starts[n.lineno - 1],
                                f"`{src.seg(n)}` dropped from `{_qual(call.func)}`"))  # type: ignore[attr-defined]
    return out


def mixed_indexing(src: Source) -> list[Site]:
    free: dict[str, str] = {}
    for a in src.nodes(ast.Assign):
        v = a.value
        if (len(a.targets) == 1 and isinstance(a.targets[0], ast.Name) and isinstance(v, ast.Subscript)
                and _is_call(v.value, src.nl, ("arange",)) and isinstance(v.slice, ast.Tuple)
                and isinstance(v.slice.elts[0], ast.Constant) and v.value.args):  # type: ignore[attr-defined]
            free[a.targets[0].id] = src.seg(v.value.args[0])  # type: ignore[attr-defined]
    out = []
    for s in src.nodes(ast.Subscript):
        elts = s.slice.elts if isinstance(s.slice, ast.Tuple) else []
        for e in elts:
            if isinstance(e, ast.Name) and e.id in free and any(not isinstance(o, ast.Slice) for o in elts if o is not e):
                out.append(src.swap(e, f"0:{free[e.id]}", f"index array `{e.id}` mixed with a slice `0:{free[e.id]}`"))
    return out
