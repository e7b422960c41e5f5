"""Splitting an over-wide partition dim into a tile loop: the quick fix of ``err_num_partition_exceed_arch_limit``.

Owns one transformation: a straight-line block that loads ``P > 128`` rows from HBM, computes on them with
row-local operations (element-wise ``nl`` ops and operators, free-axis reductions, element-wise ISA calls)
and stores the ``P`` rows back becomes a loop over 128-row tiles, every HBM row range offset by ``i * 128``
(``for i in nl.affine_range(P // 128)`` in classic kernels, ``range`` in the new API). A remainder is a
``min()``-clamped last tile in the new API, and a straight-line tail block in the classic API (whose loop
indices are symbolic, so ``min`` cannot clamp them).

Offered only when provably the same computation: every statement has a recognised form, every tile the
block reads is made in it, none of its tiles is named outside it, it reads no HBM tensor it writes and writes
each one once, and every on-chip tile and HBM row range in it spans exactly ``P`` rows (compared as linear
forms, so ``a[t * 256:(t + 1) * 256]`` qualifies). Pure AST and text: the only interpreter fact used is ``P``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field

from . import ast_edit as ed
from . import isa_signatures as isa_sig
from .ast_edit import Lin, Refuse, Span

PMAX = 128
MAX_BLOCK = 64  # statements in a block (a longer straight-line run gets no fix)

# row-local nl APIs: element-wise (any arity) and reductions over free axes
NL_ELEMENTWISE = {
    "exp", "log", "sqrt", "rsqrt", "reciprocal", "square", "abs", "negative", "sign", "tanh", "sigmoid", "relu",
    "gelu", "silu", "sin", "cos", "erf", "softplus", "trunc", "floor", "ceil", "add", "subtract", "multiply",
    "divide", "maximum", "minimum", "power", "copy"}
NL_REDUCE = {"sum", "max", "min", "mean", "prod"}
# the role of each parameter of the element-wise ISA instructions (``isa_signatures``): tile operand, tile or
# static value, static value, reduction axis, destination, absent
_ISA_ROLES = {"data": "tile", "data1": "tile", "data2": "tile", "src": "tile", "bias": "tile?", "scale": "tile?",
              "operand0": "tile?", "operand1": "tile?", "op": "static", "op0": "static", "op1": "static",
              "reverse0": "static", "reverse1": "static", "engine": "static", "dtype": "static", "negate": "static",
              "keepdims": "static", "axis": "axis", "mask": "none", "reduce_op": "none", "reduce_res": "none",
              "reduce_cmd": "none", "dst": "dst", "name": "static"}
# (old lower bound as a "lo + " prefix, or its value when it is a constant) -> new (lower, upper) texts
Bounds = Callable[[str, int | None], tuple[str, str]]


@dataclass
class _Access:
    """An HBM row range of the block: the node to replace and its lower bound (None = 0)."""

    node: ast.expr
    lower: ast.expr | None
    rank: int = 0  # > 0: a bare tensor name of this rank (rewritten to a full subscript)


@dataclass
class _Block:
    tiles: set[str] = field(default_factory=set)
    loads: set[str] = field(default_factory=set)
    stores: list[str] = field(default_factory=list)
    accesses: list[_Access] = field(default_factory=list)
    alloc_rows: list[ast.expr] = field(default_factory=list)  # first shape element of each on-chip allocation


class _Analysis:
    """Facts about one kernel function that every candidate block shares."""

    def __init__(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, aliases: dict[str, str],
                 constants: dict[str, int], generation: str, shapes: dict[str, tuple[int | None, ...]]) -> None:
        self.fn, self.aliases, self.generation = fn, aliases, generation
        self.params = {a.arg for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs}
        self.assigned = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        # read by name, never as a whole: the static tier reuses this kernel's results while the constants and
        # imports it looked up keep their values (``static/reads.py``), whatever else the module gains
        self.module_constants = constants
        self.shapes = dict(shapes)
        for a in fn.args.args + fn.args.kwonlyargs:
            if isinstance(a.annotation, ast.Subscript) and ed.qual(a.annotation.value, aliases) in (
                    "neuronxcc.nki.typing.tensor", "nki.typing.tensor"):
                dims = a.annotation.slice.elts if isinstance(a.annotation.slice, ast.Tuple) else [a.annotation.slice]
                self.shapes[a.arg] = tuple(self.const(d) for d in dims)
        stores = [n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
        for stmt in fn.body:  # HBM tensors allocated once, at the top of the kernel, with a literal shape
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                    and stores.count(stmt.targets[0].id) == 1 and isinstance(stmt.value, ast.Call) \
                    and ed.api_name(stmt.value.func, self.aliases, "language") == "ndarray" and stmt.value.args \
                    and isinstance(stmt.value.args[0], ast.Tuple):
                self.shapes.setdefault(stmt.targets[0].id, tuple(self.const(d) for d in stmt.value.args[0].elts))
        self.taken = _Taken(ed.taken_names(fn), aliases, constants)
        self.occurrences: dict[str, list[ast.Name]] = {}
        self.declared: set[str] = set()  # global / nonlocal names
        self.place: dict[int, tuple[list[ast.stmt], int]] = {}  # statement -> (its body, its index there)
        for node in ast.walk(fn):
            if isinstance(node, ast.Name):
                self.occurrences.setdefault(node.id, []).append(node)
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                self.declared.update(node.names)
            for field_name in ("body", "orelse", "finalbody"):
                seq = getattr(node, field_name, None)
                if isinstance(seq, list):
                    self.place.update((id(st), (seq, n)) for n, st in enumerate(seq))
        self.candidates: dict[tuple[int, int], bool] = {}
        self.results: dict[tuple[int, int, int, int], tuple[Span, str] | None] = {}
        self.components: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
        self.text = ""
        self.given: tuple[dict[str, int], dict[str, tuple[int | None, ...]]] = ({}, {})

    def lin(self, e: ast.expr | None) -> Lin | None:
        """``e`` as a linear form (see ``ast_edit.linear``); a missing slice bound is 0. Within one block every
        name keeps its value (the block binds tiles only), so any other name is an opaque atom."""
        return {"": 0} if e is None else ed.linear(e, self.aliases, self._name_value)

    def constant(self, name: str) -> int | None:
        """The integer module constant ``name`` names here (not a parameter or a name the kernel assigns)."""
        if name in self.assigned or name in self.params:
            return None
        value = self.module_constants.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def _name_value(self, name: str) -> int | str:
        value = self.constant(name)
        return "atom" if value is None else value

    def const(self, e: ast.expr) -> int | None:
        return ed.lin_const(self.lin(e))

    def static(self, e: ast.expr) -> bool:
        """A compile-time value the block does not depend on: numbers, None/bools, module attributes,
        integer module constants, ``name.dtype``."""
        if isinstance(e, ast.Constant):
            return e.value is None or isinstance(e.value, (bool, int, float, str))
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.USub, ast.UAdd)):
            return self.static(e.operand)
        if isinstance(e, ast.Name):
            return self.constant(e.id) is not None
        if isinstance(e, ast.Attribute):
            if e.attr == "dtype" and isinstance(e.value, ast.Name):
                return True
            root = e
            while isinstance(root, ast.Attribute):
                root = root.value  # type: ignore[assignment]
            return isinstance(root, ast.Name) and root.id in self.aliases and root.id not in self.assigned \
                and root.id not in self.params
        if isinstance(e, ast.Tuple):
            return all(self.static(x) for x in e.elts)
        return False


def split_block(fn: ast.FunctionDef | ast.AsyncFunctionDef, text: str, stmt: ast.stmt, rows: int,
                aliases: dict[str, str], constants: dict[str, int], generation: str,
                shapes: dict[str, tuple[int | None, ...]] | None = None) -> tuple[Span, str] | None:
    """The edit (span, new text) turning the block around ``stmt`` into a loop over 128-row tiles, or None.

    ``text``/``fn``: the source the AST positions refer to and the kernel function in it; ``rows``: the
    partition size ``P`` the diagnostic reported; ``shapes``: known HBM parameter shapes (from the task)."""
    if rows <= PMAX or generation not in ("classic", "new"):
        return None
    an = _analysis(fn, text, aliases, constants, generation, shapes or {})
    where = an.place.get(id(stmt))
    if where is None:
        return None
    body, k = where
    lo = hi = k
    while lo > 0 and _candidate(an, body[lo - 1], rows):
        lo -= 1
        if hi - lo >= MAX_BLOCK:
            return None
    while hi + 1 < len(body) and _candidate(an, body[hi + 1], rows):
        hi += 1
        if hi - lo >= MAX_BLOCK:
            return None
    # the whole run of candidates, else the statements connected to the flagged one through its tiles
    for start, end in dict.fromkeys([(lo, hi), _component(an, body, lo, hi, k)]):
        key = (id(body), start, end, rows)
        if key not in an.results:
            block = _validate(an, body[start:end + 1], rows)
            closed = block is not None and _closed(an, body[start:end + 1], block)
            an.results[key] = _rewrite(an, text, body[start:end + 1], block, rows) if block and closed else None
        if an.results[key] is not None:
            return an.results[key]
    return None


class _Taken:
    """The names a new one must not collide with: the kernel's own, then module imports and constants looked
    up one by one (``ed.fresh`` asks ``in`` and ``add``s)."""

    def __init__(self, own: set[str], aliases: dict[str, str], constants: dict[str, int]) -> None:
        self.own, self.aliases, self.constants = own, aliases, constants

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self.own or name in self.aliases or name in self.constants)

    def add(self, name: str) -> None:
        self.own.add(name)

    def copy(self) -> "_Taken":
        return _Taken(set(self.own), self.aliases, self.constants)


def _alias(an: "_Analysis", module: str) -> str | None:
    """The shortest name the kernel itself uses for ``nki.<module>`` (looked up name by name); else the
    module's shortest (``ed.alias_of``: every import read)."""
    wanted = (f"neuronxcc.nki.{module}", f"nki.{module}")
    used = sorted((n for n in an.occurrences if n.isidentifier() and n not in an.assigned and n not in an.params
                   and an.aliases.get(n) in wanted), key=lambda n: (len(n), n))
    return used[0] if used else ed.alias_of(an.aliases, module)


_ANALYSES: list[_Analysis] = []  # the last few functions (one check_text call flags many lines of one kernel)


def _analysis(fn: ast.FunctionDef | ast.AsyncFunctionDef, text: str, aliases: dict[str, str],
              constants: dict[str, int], generation: str, shapes: dict[str, tuple[int | None, ...]]) -> _Analysis:
    for an in _ANALYSES:  # the entry holds ``fn`` alive, so an equal identity is the same function
        if an.fn is fn and an.text is text and an.aliases is aliases and an.generation == generation \
                and an.given[0] is constants and an.given[1] == shapes:
            return an
    an = _Analysis(fn, aliases, constants, generation, shapes)
    an.text, an.given = text, (constants, shapes)
    _ANALYSES.insert(0, an)
    del _ANALYSES[4:]
    return an


def _component(an: _Analysis, body: list[ast.stmt], lo: int, hi: int, k: int) -> tuple[int, int]:
    """The smallest run of ``body[lo:hi + 1]`` holding every statement that shares a tile with ``body[k]``,
    transitively."""
    key = (id(body), lo, hi)
    if key not in an.components:
        defined = {t.id for s in body[lo:hi + 1] if isinstance(s, ast.Assign) for t in s.targets
                   if isinstance(t, ast.Name)}
        group = list(range(lo, hi + 1))  # union-find over the run, joined through shared tile names

        def find(n: int) -> int:
            while group[n - lo] != n:
                group[n - lo] = group[group[n - lo] - lo]
                n = group[n - lo]
            return n

        owner: dict[str, int] = {}
        for n in range(lo, hi + 1):
            for name in ed.names_in(body[n]) & defined:
                if name in owner:
                    group[find(n) - lo] = find(owner[name])
                else:
                    owner[name] = n
        roots = [find(n) for n in range(lo, hi + 1)]
        hulls: dict[int, tuple[int, int]] = {}
        for n, r in zip(range(lo, hi + 1), roots):
            a, b = hulls.get(r, (n, n))
            hulls[r] = (min(a, n), max(b, n))
        an.components[key] = [hulls[r] for r in roots]
    return an.components[key][k - lo]


def _candidate(an: _Analysis, stmt: ast.stmt, rows: int) -> bool:
    """Could ``stmt`` belong to a block (its own form, whatever tiles it names)?"""
    key = (id(stmt), rows)
    if key not in an.candidates:
        an.candidates[key] = _validate(an, [stmt], rows, permissive=True) is not None
    return an.candidates[key]


def _validate(an: _Analysis, stmts: list[ast.stmt], rows: int, permissive: bool = False) -> _Block | None:
    block = _Block()
    try:
        for s in stmts:
            _statement(an, s, block, rows, permissive)
    except Refuse:
        return None
    if not permissive and not block.stores:
        return None
    return block


def _statement(an: _Analysis, s: ast.stmt, b: _Block, rows: int, permissive: bool) -> None:
    if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
        name = s.targets[0].id
        v = s.value
        if isinstance(v, ast.Call) and ed.api_name(v.func, an.aliases, "language") in ("ndarray", "zeros"):
            _allocation(an, v, b, rows)
        elif _expr(an, v, b, rows, permissive) != "tile":
            raise Refuse
        if name in an.aliases or name in an.params:
            raise Refuse
        b.tiles.add(name)
        return
    if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)):
        raise Refuse
    call = s.value
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        raise Refuse
    if ed.api_name(call.func, an.aliases, "language") == "store":
        bound = ed.bind(call, ("dst", "value", "mask"))
        if not ed.absent(bound.get("mask")) or "dst" not in bound or "value" not in bound:
            raise Refuse
        _access(an, bound["dst"], b, rows, store=True)
        if _expr(an, bound["value"], b, rows, permissive) != "tile":
            raise Refuse
        return
    isa = ed.api_name(call.func, an.aliases, "isa")
    if isa == "dma_copy":
        bound = ed.bind(call, ("dst", "src"), extra=True)
        dst, src = bound.get("dst"), bound.get("src")
        if dst is None or src is None or not ed.absent(bound.get("mask")) or bound.get("dst_rmw_op") is not None:
            raise Refuse
        for key, value in bound.items():
            if key not in ("dst", "src", "mask") and not an.static(value):
                raise Refuse
        if isinstance(src, ast.Name) and _is_tile(an, src, b, permissive):
            _access(an, dst, b, rows, store=True)
        elif isinstance(dst, ast.Name) and _is_tile(an, dst, b, permissive):
            _access(an, src, b, rows, store=False)
        else:
            raise Refuse
        return
    if isa in isa_sig.NEW and an.generation == "new":
        _isa_call(an, call, isa_sig.NEW[isa], b, rows, permissive)
        return
    raise Refuse


def _allocation(an: _Analysis, call: ast.Call, b: _Block, rows: int) -> None:
    bound = ed.bind(call, ("shape", "dtype", "buffer", "name"))
    shape = bound.get("shape")
    buf = bound.get("buffer")
    if not isinstance(shape, ast.Tuple) or len(shape.elts) < 2 or "dtype" not in bound:
        raise Refuse
    if buf is not None and (ed.qual(buf, an.aliases) or "").rsplit(".", 1)[-1] != "sbuf":
        raise Refuse
    if an.const(shape.elts[0]) != rows or not all(an.static(x) or an.lin(x) is not None for x in shape.elts[1:]):
        raise Refuse
    if any(ed.names_in(x) & b.tiles for x in shape.elts[1:]) or not an.static(bound["dtype"]) or \
            not ed.absent(bound.get("name")):  # one name for every tile of the loop: not offered
        raise Refuse
    b.alloc_rows.append(shape.elts[0])


def _isa_call(an: _Analysis, call: ast.Call, params: tuple[str, ...], b: _Block, rows: int,
              permissive: bool) -> str:
    bound = ed.bind(call, params)
    tiles = 0
    for key, value in bound.items():
        role = _ISA_ROLES.get(key, "none")
        if role == "dst":
            if not (isinstance(value, ast.Name) and _is_tile(an, value, b, permissive)):
                raise Refuse
        elif role == "tile":
            if _expr(an, value, b, rows, permissive) != "tile":
                raise Refuse
            tiles += 1
        elif role == "tile?":
            if _expr(an, value, b, rows, permissive) is None:
                raise Refuse
        elif role == "static":
            if not an.static(value):
                raise Refuse
        elif role == "axis":
            if not _free_axes(value):
                raise Refuse
        elif not ed.absent(value):
            raise Refuse
    if "dst" in params and "dst" not in bound or tiles == 0:
        raise Refuse
    return "tile"


def _expr(an: _Analysis, e: ast.expr, b: _Block, rows: int, permissive: bool) -> str | None:
    """'tile' for a row-local expression of block tiles (and loads), 'static' for a constant, else None."""
    if isinstance(e, ast.Name) and _is_tile(an, e, b, permissive):
        return "tile"
    if an.static(e):
        return "static"
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.USub, ast.UAdd)):
        return _expr(an, e.operand, b, rows, permissive)
    if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        sides = {_expr(an, e.left, b, rows, permissive), _expr(an, e.right, b, rows, permissive)}
        if None in sides:
            return None
        return "tile" if "tile" in sides else "static"
    if not isinstance(e, ast.Call) or any(isinstance(a, ast.Starred) for a in e.args) or \
            any(k.arg is None for k in e.keywords):
        return None
    name = ed.api_name(e.func, an.aliases, "language")
    try:
        if name == "load":
            bound = ed.bind(e, ("src", "mask", "dtype"))
            if "src" not in bound or not ed.absent(bound.get("mask")) or not an.static(bound.get("dtype") or
                                                                                    ast.Constant(None)):
                return None
            _access(an, bound["src"], b, rows, store=False)
            return "tile"
        if name in NL_ELEMENTWISE or name in NL_REDUCE:
            reduce = name in NL_REDUCE
            operands = list(e.args[:1] if reduce else e.args)
            extra = {k.arg: k.value for k in e.keywords}
            if reduce:
                if len(e.args) > 2 or not e.args:
                    return None
                axis = e.args[1] if len(e.args) == 2 else extra.pop("axis", None)
                if axis is None or not _free_axes(axis):
                    return None
                keepdims = extra.pop("keepdims", None)
                if keepdims is not None and not (isinstance(keepdims, ast.Constant) and
                                                 isinstance(keepdims.value, bool)):
                    return None
            if not ed.absent(extra.pop("mask", None)) or set(extra) - {"dtype"} or \
                    ("dtype" in extra and not an.static(extra["dtype"])):
                return None
            kinds = [_expr(an, a, b, rows, permissive) for a in operands]
            return "tile" if "tile" in kinds and None not in kinds else None
        isa = ed.api_name(e.func, an.aliases, "isa")
        if isa in isa_sig.CLASSIC and an.generation == "classic":
            return _isa_call(an, e, isa_sig.CLASSIC[isa], b, rows, permissive)
    except Refuse:
        return None
    return None


def _is_tile(an: _Analysis, e: ast.Name, b: _Block, permissive: bool) -> bool:
    if e.id in b.tiles:
        return True
    return permissive and e.id not in an.aliases and an.constant(e.id) is None and e.id not in an.params


def _free_axes(e: ast.expr) -> bool:
    items = e.elts if isinstance(e, (ast.Tuple, ast.List)) else [e]
    return bool(items) and all(isinstance(x, ast.Constant) and type(x.value) is int and (x.value >= 1 or x.value == -1)
                               for x in items)


def _access(an: _Analysis, e: ast.expr, b: _Block, rows: int, store: bool) -> None:
    """Record an HBM access of exactly ``rows`` rows: ``t[lo:hi, ...]`` or a bare ``t`` of known shape."""
    if isinstance(e, ast.Name):
        shape = an.shapes.get(e.id)
        if not shape or shape[0] != rows or len(shape) < 2:
            raise Refuse
        base, acc = e.id, _Access(e, None, len(shape))
    elif isinstance(e, ast.Subscript) and isinstance(e.value, ast.Name):
        base = e.value.id
        keys = e.slice.elts if isinstance(e.slice, ast.Tuple) else [e.slice]
        first = keys[0]
        if not isinstance(first, ast.Slice) or (first.step is not None and an.const(first.step) != 1):
            raise Refuse
        lower = an.lin(first.lower)
        height = (an.shapes.get(base) or (None,))[0]
        upper = an.lin(first.upper) if first.upper is not None else ({"": height} if height is not None else None)
        if lower is None or upper is None:
            raise Refuse
        if ed.lin_const(ed.lin_sub(upper, lower)) != rows:
            raise Refuse
        for key in keys:
            if any(isinstance(n, (ast.Call, ast.Starred, ast.Lambda, ast.NamedExpr)) for n in ast.walk(key)):
                raise Refuse
            if any(n in b.tiles or n in an.aliases for n in ed.names_in(key)):
                raise Refuse
        acc = _Access(first, first.lower)
    else:
        raise Refuse
    if base in b.tiles or base in an.aliases:
        raise Refuse
    (b.stores.append(base) if store else b.loads.add(base))
    b.accesses.append(acc)


def _closed(an: _Analysis, stmts: list[ast.stmt], b: _Block) -> bool:
    """The block's tiles are private to it and its HBM writes cannot interfere with its reads."""
    if b.loads & set(b.stores) or len(set(b.stores)) != len(b.stores) or (b.tiles & (b.loads | set(b.stores))):
        return False
    if b.tiles & (an.params | an.declared):
        return False
    first, last = stmts[0], stmts[-1]
    span = (first.lineno, first.col_offset), (last.end_lineno or last.lineno, last.end_col_offset or 0)
    return all(span[0] <= (n.lineno, n.col_offset) < span[1] for t in b.tiles for n in an.occurrences.get(t, ()))


# -- rewriting ------------------------------------------------------------------------------------------
def _rewrite(an: _Analysis, text: str, stmts: list[ast.stmt], b: _Block, rows: int) -> tuple[Span, str] | None:
    lines = text.split("\n")
    first, last = stmts[0], stmts[-1]
    if last.end_lineno is None or not all(ed.own_lines(lines, s, tabs=True) for s in stmts):
        return None
    taken = an.taken.copy()
    loop, size = ed.fresh("i", taken), ed.fresh("rows", taken)
    lead = lines[first.lineno - 1][:len(lines[first.lineno - 1]) - len(lines[first.lineno - 1].lstrip())]
    unit = indent_unit(lines, an.fn)
    full, rem = divmod(rows, PMAX)
    nl = _alias(an, "language")
    tail: list[str] = []
    if an.generation == "classic":  # symbolic loop indices: a remainder is a straight-line tail block
        if nl is None:
            return None
        head = [f"for {loop} in {nl}.affine_range({full}):"]
        body = _copy(an, text, lines, stmts, b, _loop_bounds(loop, f"({loop} + 1) * {PMAX}"), str(PMAX))
        if rem:
            tail = _copy(an, text, lines, stmts, b, _tail_bounds(full * PMAX, rows), str(rem))
    elif rem:  # new API: Python loop indices, the last tile is clamped with min()
        head = [f"for {loop} in range({full + 1}):",
                f"{lead}{unit}{size} = min({PMAX}, {rows} - {loop} * {PMAX})"]
        body = _copy(an, text, lines, stmts, b, _loop_bounds(loop, f"{loop} * {PMAX} + {size}"), size)
    else:
        head = [f"for {loop} in range({full}):"]
        body = _copy(an, text, lines, stmts, b, _loop_bounds(loop, f"({loop} + 1) * {PMAX}"), str(PMAX))
    # one level deeper in the file's own indentation (a continuation line is shifted by the same unit)
    out = head + [(lead + unit + x[len(lead):] if x.startswith(lead) else unit + x) if x.strip() else ""
                  for x in body] + [x if x.strip() else "" for x in tail]
    span = Span(first.lineno, first.col_offset, last.end_lineno, len(ed.line_bytes(lines, last.end_lineno)))
    return span, "\n".join(out)


def indent_unit(lines: list[str], fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """One level of the file's indentation, as the kernel writes it: the text between the ``def``'s
    indentation and its first body line's (a tab, two spaces, ...); four spaces when that says nothing."""
    def_line = lines[fn.lineno - 1] if 0 < fn.lineno <= len(lines) else ""
    first = fn.body[0].lineno if fn.body else 0
    body_line = lines[first - 1] if first != fn.lineno and 0 < first <= len(lines) else ""
    outer = def_line[:len(def_line) - len(def_line.lstrip())]
    inner = body_line[:len(body_line) - len(body_line.lstrip())]
    step = inner[len(outer):] if inner.startswith(outer) else ""
    return step if step and not step.strip() else "    "


def _copy(an: _Analysis, text: str, lines: list[str], stmts: list[ast.stmt], b: _Block, bounds: Bounds,
          rows_text: str) -> list[str]:
    """The block's lines (original indentation) with row ranges and allocation heights replaced."""
    start = ed.offset(lines, stmts[0].lineno, 0)
    end_line = stmts[-1].end_lineno or stmts[-1].lineno
    end = ed.offset(lines, end_line, len(ed.line_bytes(lines, end_line)))
    edits: list[tuple[int, int, str]] = []
    for acc in b.accesses:
        value = an.const(acc.lower) if acc.lower is not None else 0
        prefix = f"{ed.segment(text, lines, acc.lower)} + " if acc.lower is not None and value != 0 else ""
        new_lo, new_hi = bounds(prefix, value)
        repl = f"{new_lo}:{new_hi}"  # a bare tensor name becomes a full subscript
        repl = f"{ed.segment(text, lines, acc.node)}[{repl}{', :' * (acc.rank - 1)}]" if acc.rank else repl
        edits.append((*ed.char_range(lines, acc.node), repl))
    for node in b.alloc_rows:
        edits.append((*ed.char_range(lines, node), rows_text))
    chunk = ed.replace_spans(text[start:end], [(s - start, e - start, repl) for s, e, repl in edits])
    return chunk.split("\n")


def _loop_bounds(loop: str, upper: str) -> Bounds:
    """Rows ``[lo + i * 128, lo + upper)`` of loop iteration ``i``."""
    return lambda prefix, _: (f"{prefix}{loop} * {PMAX}", f"{prefix}{upper}")


def _tail_bounds(start: int, stop: int) -> Bounds:
    """Rows ``[lo + start, lo + stop)``, folded when ``lo`` is a constant."""
    return lambda prefix, value: ((f"{value + start}", f"{value + stop}") if value is not None
                                  else (f"{prefix}{start}", f"{prefix}{stop}"))
