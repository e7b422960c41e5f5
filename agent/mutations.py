"""The mutation suite: deterministic broken variants of the project's correct example kernels.

Owns the mutation operators (each injects one realistic NKI bug, taken from the error catalog, the static
rules and the quick-fix fixtures), the enumeration of kernel x operator x site (``mutants``) and the
filter that keeps only mutants the embedded toolchain really finds broken (``keep_broken``). The fix
agent's benchmark (repair rate, time per fix of the offline ``rules`` backend) runs over this suite.

Two families of operators: ``quick_fix`` bugs are of a kind some deterministic quick fix in
``diagnostics/`` targets; ``logic`` bugs (off-by-one, swapped operands, wrong axis / function / scale)
are ones no quick fix can repair, so the repair rate is measured honestly.

No example has a ``sequential_range`` loop or a ``&`` mask, so "sequential_range -> affine_range" has no
site and "& -> and" is injected as a two-sided mask bound joined with ``and``.

    python -m nki_agent.agent.mutations --list     # the suite
    python -m nki_agent.agent.mutations --check    # verify every mutant; table of what broke how
"""

from __future__ import annotations

import argparse
import ast
import itertools
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from ..toolchain import api

MAX_PER_KERNEL = 2  # sites of one operator in one kernel: a third would exercise the same repair again
MAX_PER_OPERATOR = 10  # per operator over all kernels, spread evenly: ~100 mutants, a full agent run in minutes
VERIFY_SEEDS = 2  # a second input draw catches a bug one lucky draw hides, at twice the cost of one
WRONG_RESULT = "sim_wrong_result"  # the catalog id of "runs, but the output differs from the reference"
BAD_PARTITIONS = "256"  # the classic "tile of 256 rows" mistake: twice nl.tile_size.pmax
REDUCTIONS = {"max", "min", "sum", "mean", "prod", "tensor_reduce"}  # calls whose axis= picks the reduced axis
ACTIVATION_SWAP = {"gelu": "silu", "silu": "gelu", "relu": "gelu", "rsqrt": "sqrt"}  # plausible confusions
NON_COMMUTATIVE = {"subtract", "divide"}  # element-wise ops whose operand order matters
REPO_EXAMPLES = Path(__file__).resolve().parents[1] / "examples"  # a source checkout's examples/ (not installed)


@dataclass(frozen=True)
class Mutant:
    """One broken variant of one example kernel. ``line``: 1-based line of the injected bug in ``text``
    (for a deleted statement, the line where it was). ``expected_class``: the kind of bug in the words of
    the error catalog; ``observed``: what verification reported (set by ``keep_broken``)."""

    id: str
    operator: str
    kernel_path: str
    task_path: str
    text: str
    line: int
    description: str
    expected_class: str
    observed: str = ""


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
def _bool_and(src: Source) -> list[Site]:
    out = []
    for kw in src.nodes(ast.keyword):
        v = kw.value
        if kw.arg == "mask" and isinstance(v, ast.Compare) and len(v.ops) == 1 and isinstance(v.ops[0], ast.Lt):
            left, right = src.seg(v.left), src.seg(v.comparators[0])
            out.append(src.swap(v, f"({left} >= 0) and ({left} < {right})",
                                f"mask `{src.seg(v)}` made two-sided with `and` instead of `&`"))
    return out


def _arange_1d(src: Source) -> list[Site]:
    return [src.swap(n, src.seg(n.value), f"`{src.seg(n)}` written as a 1-D `{src.seg(n.value)}`")
            for n in src.nodes(ast.Subscript) if _is_call(n.value, src.nl, ("arange",))]


def _drop_store(src: Source) -> list[Site]:
    hbm = set(_allocs(src, "shared_hbm"))
    writes = [s for s in src.nodes(ast.Expr) if _is_call(s.value, src.nl, ("store",))
              or (_is_call(s.value, src.nisa, ("dma_copy",)) and _root(_arg(s.value, 0, "dst")) in hbm)]
    return [src.site([src.delete(w)], src.lines_of(w)[0], f"final output write `{src.seg(w)}` removed")
            for w in writes[-1:]]


def _psum_bf16(src: Source) -> list[Site]:
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


def _shared_hbm_in_loop(src: Source) -> list[Site]:
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


def _partition_256(src: Source) -> list[Site]:
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


def _psum_store(src: Source) -> list[Site]:
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


def _classic_import(src: Source) -> list[Site]:
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


def _off_by_one(src: Source) -> list[Site]:
    out = []
    for n in src.nodes((ast.Slice, ast.Call)):
        bound = n.upper if isinstance(n, ast.Slice) else n.args[0] if (
            _is_call(n, src.nl, ("arange",)) and n.args) else None
        if bound is not None:
            out.append(src.swap(bound, _minus_one(src, bound), f"bound `{src.seg(bound)}` off by one (inclusive)"))
    return out


def _swap_operands(src: Source) -> list[Site]:
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


def _reduce_axis(src: Source) -> list[Site]:
    out = []
    for c in src.nodes(ast.Call):
        axis = _arg(c, 99, "axis")
        if (_is_call(c, src.nl, REDUCTIONS) or _is_call(c, src.nisa, REDUCTIONS)) and isinstance(
                axis, ast.Constant) and axis.value == 1:
            out.append(src.swap(axis, "0", f"`{_qual(c.func)}` reduces the partition axis (axis=0) instead of axis=1"))
    return out


def _wrong_activation(src: Source) -> list[Site]:
    out = []
    for n in src.nodes(ast.Attribute):
        parent = src.parents.get(id(n))
        used = (isinstance(parent, ast.Call) and parent.func is n) or (isinstance(parent, ast.keyword)
                                                                        and parent.arg == "op")
        if used and isinstance(n.value, ast.Name) and n.value.id == src.nl and n.attr in ACTIVATION_SWAP:
            new = f"{src.nl}.{ACTIVATION_SWAP[n.attr]}"
            out.append(src.swap(n, new, f"`{src.seg(n)}` replaced by `{new}`"))
    return out


def _drop_scale(src: Source) -> list[Site]:
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


def _mixed_indexing(src: Source) -> list[Site]:
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


@dataclass(frozen=True)
class Operator:
    """A mutation operator: ``sites(source)`` lists every mutant it can make of one kernel, in source order.
    ``expected_class``: what a correct toolchain reports for it under the task's default target;
    ``family``: ``quick_fix`` if a deterministic quick fix in ``diagnostics/`` targets bugs of this kind,
    ``logic`` if none can."""

    name: str
    expected_class: str
    family: Literal["quick_fix", "logic"]
    description: str
    sites: Callable[[Source], list[Site]]
    expected_new: str = ""  # the class in a new-API kernel, when the generations differ

    def expected(self, generation: str) -> str:
        return self.expected_new if generation == "new" and self.expected_new else self.expected_class


_OPERATORS = (
    Operator("bool_and", "err_control_flow_condition_depending_on_arange", "quick_fix",
             "`&` -> `and` in a mask (Python truth value of an index expression)", _bool_and),
    Operator("arange_1d", "err_1d_arange_not_supported", "quick_fix",
             "`nl.arange(n)[:, None]` -> `nl.arange(n)`", _arange_1d),
    Operator("drop_store", "err_tensor_output_not_written_to", "quick_fix",
             "the final write of the output removed", _drop_store),
    # bf16 PSUM is legal on the default targets (classic trn1, new trn3): the bug shows as lost precision;
    # sim_unsupported_dtype (and its quick fix) only on a new-API kernel verified for trn1/trn2
    Operator("psum_bf16", WRONG_RESULT, "quick_fix", "matmul PSUM accumulator fp32 -> bf16", _psum_bf16),
    # the new compiler allows the allocation in a loop: each iteration then rebinds a fresh output
    Operator("shared_hbm_in_loop", "err_shared_hbm_must_in_kernel_level", "quick_fix",
             "the hoisted shared_hbm output allocated inside the loop", _shared_hbm_in_loop, WRONG_RESULT),
    Operator("partition_256", "err_num_partition_exceed_arch_limit", "quick_fix",
             "partition tile size 128 -> 256", _partition_256),
    Operator("psum_store", "err_unsupported_memory", "quick_fix",
             "PSUM -> SBUF copy removed, the PSUM tile stored straight to HBM", _psum_store),
    Operator("classic_import", "sim_removed_api", "quick_fix",
             "classic `neuronxcc.nki` imports in a new-API kernel (the migration case)", _classic_import),
    Operator("mixed_indexing", "err_unsupported_mixing_basic_advanced_tensor_indexing", "logic",
             "a free-axis index array replaced by a slice next to an index array", _mixed_indexing),
    Operator("off_by_one", "sim_shape_mismatch", "logic", "a slice or arange bound one short", _off_by_one),
    Operator("swap_operands", WRONG_RESULT, "logic",
             "operands of a non-commutative op (subtract, divide, matmul) swapped", _swap_operands),
    Operator("reduce_axis", "sim_invalid_argument", "logic", "reduction over the partition axis (axis=0) "
             "instead of axis=1", _reduce_axis),
    Operator("wrong_activation", WRONG_RESULT, "logic", "gelu/silu/relu/rsqrt swapped for a look-alike",
             _wrong_activation),
    Operator("drop_scale", WRONG_RESULT, "logic", "a scale factor (1/n, 1/sqrt(d), scale=) dropped", _drop_scale),
)


_BY_NAME = {op.name: op for op in _OPERATORS}


def operators() -> list[Operator]:
    return list(_OPERATORS)


def kernels(examples_dir: str | os.PathLike[str] | None = None) -> list[tuple[Path, Path]]:
    """(kernel, task) pairs: every ``kernel_*.py`` next to a ``task.py``, sorted (as ``nki-agent demo``)."""
    default = REPO_EXAMPLES if REPO_EXAMPLES.is_dir() else Path("examples")
    root = Path(examples_dir) if examples_dir is not None else default
    return [(k, t) for t in sorted(root.glob("*/task.py")) for k in sorted(t.parent.glob("kernel_*.py"))]


def _spread(items: list[Mutant], n: int) -> list[Mutant]:
    return items if len(items) <= n else [items[i * len(items) // n] for i in range(n)]


def mutants(examples_dir: str | os.PathLike[str] | None = None,
            operators: Sequence[str | Operator] | None = None, limit: int | None = None, *,
            per_kernel: int = MAX_PER_KERNEL, per_operator: int = MAX_PER_OPERATOR) -> list[Mutant]:
    """Every mutant of every example kernel, deterministic. Ids are ``<task>/<api>/<operator>/<k>`` (k: the
    site's index in the kernel, source order). At most ``per_kernel`` sites per operator and kernel, and
    ``per_operator`` per operator (spread evenly over the kernels). The list interleaves the operators
    round-robin, so ``limit`` keeps a sample of every operator."""
    chosen = [o if isinstance(o, Operator) else _by_name(o) for o in operators] if operators else list(_OPERATORS)
    sources = [(k, t, Source(k.read_text(encoding="utf-8"))) for k, t in kernels(examples_dir)]
    per_op: list[list[Mutant]] = []
    for op in chosen:
        found: list[Mutant] = []
        for kernel, task, src in sources:
            seen = {src.text}
            api_name = kernel.stem.removeprefix("kernel_")
            for k, site in enumerate(op.sites(src)[:per_kernel]):
                if site.text in seen or not _parses(site.text):
                    continue
                seen.add(site.text)
                found.append(Mutant(f"{kernel.parent.name}/{api_name}/{op.name}/{k}", op.name, str(kernel),
                                    str(task), site.text, site.line, site.description,
                                    op.expected(src.generation)))
        per_op.append(_spread(found, per_operator))
    out = [m for i in range(max(map(len, per_op), default=0)) for ms in per_op if i < len(ms) for m in [ms[i]]]
    return out[:limit] if limit is not None else out


def _by_name(name: str) -> Operator:
    if name not in _BY_NAME:
        raise ValueError(f"unknown mutation operator {name!r}; known: {', '.join(_BY_NAME)}")
    return _BY_NAME[name]


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


# -- keeping only the really broken ------------------------------------------------------------------------
Verify = Callable[[str, str], dict[str, Any]]


def _default_verify(kernel: str, task: str) -> dict[str, Any]:
    return api.verify(kernel, task, seeds=VERIFY_SEEDS)


def observed_class(result: dict[str, Any]) -> str | None:
    """The first error's code (else the first problem's, else ``sim_wrong_result``); None if correct."""
    if result.get("correct"):
        return None
    problems = result.get("problems") or []
    errors = [p for p in problems if p.get("severity", "error") == "error"] or problems
    return str(errors[0].get("code")) if errors else WRONG_RESULT


def observe(mutant: Mutant, verify: Verify | None = None) -> str | None:
    """Verify the mutant from a temp copy (``<tmp>/<task>/<kernel file name>``; the user's files untouched)."""
    with tempfile.TemporaryDirectory(prefix="nki_mutant_") as tmp:
        folder = Path(tmp) / Path(mutant.kernel_path).parent.name
        folder.mkdir()
        path = folder / Path(mutant.kernel_path).name
        path.write_text(mutant.text, encoding="utf-8")
        return observed_class((verify or _default_verify)(str(path), mutant.task_path))


def keep_broken(mutants: Sequence[Mutant], verify: Verify | None = None, jobs: int | None = None) -> list[Mutant]:
    """The mutants that do not verify correct, in order, each with ``observed`` set. Verifications run
    ``jobs`` at a time (default: one per CPU; each is its own sandboxed worker process)."""
    workers = max(1, jobs or os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        codes = list(pool.map(lambda m: observe(m, verify), mutants))
    return [replace(m, observed=c) for m, c in zip(mutants, codes) if c is not None]


# -- command line -----------------------------------------------------------------------------------------
def _table(generated: Sequence[Mutant], broken: Sequence[Mutant]) -> list[str]:
    rows = [("operator", "family", "generated", "broken", "as expected", "observed codes")]
    for op in _OPERATORS:
        gen = [m for m in generated if m.operator == op.name]
        if not gen:
            continue
        bro = [m for m in broken if m.operator == op.name]
        codes = Counter(m.observed for m in bro)
        rows.append((op.name, op.family, str(len(gen)), str(len(bro)),
                     str(sum(m.observed == m.expected_class for m in bro)),
                     ", ".join(f"{c} x{n}" for c, n in sorted(codes.items(), key=lambda x: (-x[1], x[0])))))
    rows.append(("total", "", str(len(generated)), str(len(broken)),
                 str(sum(m.observed == m.expected_class for m in broken)), ""))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[5] for r in rows]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nki_agent.agent.mutations", description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--list", action="store_true", help="print the suite")
    mode.add_argument("--check", action="store_true", help="verify every mutant, print what broke how")
    parser.add_argument("--examples", default=None, help="folder of example tasks (default: the repo's examples/)")
    parser.add_argument("--operator", action="append", help="only this operator (repeatable)")
    parser.add_argument("--limit", type=int, default=None, help="at most this many mutants")
    parser.add_argument("--jobs", type=int, default=None, help="parallel verifications (default: CPUs)")
    args = parser.parse_args(argv)
    try:
        suite = mutants(args.examples, args.operator, args.limit)
    except ValueError as e:
        parser.error(str(e))
    if args.list:
        for m in sorted(suite, key=lambda m: m.id):
            print(f"{m.id:48} {m.expected_class:42} line {m.line:<4} {m.description}")
        print(f"{len(suite)} mutants, {len({m.operator for m in suite})} operators")
        return 0
    t0 = time.perf_counter()
    broken = keep_broken(suite, jobs=args.jobs)
    print("\n".join(_table(suite, broken)))
    print(f"{len(broken)} of {len(suite)} mutants broken; {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
