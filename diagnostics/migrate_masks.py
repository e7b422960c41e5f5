"""Classic index arrays and masks -> slices: the first stage of the classic -> new API migration (``migrate``).

Owns the rewrite of the classic tiled-loop idiom, where each iteration handles the ``P`` rows from
``t * P`` on and a mask drops the rows past ``n`` in the ragged last tile::

    i_p = nl.arange(P)[:, None]            # or: i_p, i_f = nl.mgrid[0:P, 0:F]
    i_f = nl.arange(F)[None, :]
    for t in nl.affine_range((n + P - 1) // P):
        rows = t * P + i_p
        x = nl.load(a[rows, i_f], mask=(rows < n))
        nl.store(out[rows, i_f], value=nl.exp(x, mask=(rows < n)), mask=(rows < n))

becomes ``tile_rows = min(P, n - t * P)``, ``a[t * P:t * P + tile_rows, 0:F]`` and no masks. That is exact
because the loop count is provably ``ceil(n / P)`` (so ``1 <= tile_rows <= P`` in every iteration), the
masked-off rows are never stored, every mask in the loop is the same, the loop makes no tile of its own
shape (no allocation, memset, iota) and reads no tile from outside, and its operations are row-local (loads,
stores, element-wise ``nl``/ISA calls: the final check of ``migrate`` admits nothing else).
Without masks the same accesses become ``a[t * P:t * P + P, 0:F]`` (no clamp needed). Anything else raises
``Refuse``; what this stage leaves classic (other masks, other ``nl.arange`` uses) the final check refuses.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from . import ast_edit as ed
from .ast_edit import Refuse
from .static import module_info

LOOPS = {"affine_range", "sequential_range", "static_range"}
# calls whose mask= is dropped: row-local memory and element-wise operations
MASKABLE_NL = {"load", "store", "exp", "log", "sqrt", "rsqrt", "reciprocal", "square", "abs", "negative", "sign",
               "tanh", "sigmoid", "relu", "gelu", "silu", "sin", "cos", "add", "subtract", "multiply", "divide",
               "maximum", "minimum", "power", "copy"}
MASKABLE_ISA = {"tensor_tensor", "activation", "tensor_scalar", "tensor_copy", "reciprocal", "scalar_tensor_tensor"}


@dataclass
class _Index:
    axis: str  # "p" (partition, [:, None]) or "f" (free, [None, :])
    size: ast.expr
    stmt: ast.stmt


@dataclass
class _Loop:
    node: ast.For
    base: ast.expr | None = None  # the first row of the tile: ``t * P``
    bound: ast.expr | None = None  # the ``n`` of ``rows < n``
    p_index: str = ""
    aliases: dict[str, ast.Assign] = field(default_factory=dict)  # rows = t * P + i_p
    accesses: list[tuple[ast.Subscript, str]] = field(default_factory=list)  # (access, its free index)
    masks: list[tuple[ast.Call, ast.keyword]] = field(default_factory=list)
    masked_calls: set[int] = field(default_factory=set)


def masks_to_slices(text: str) -> str:
    """``text`` with the mechanical arange/mask idiom rewritten to slices (unchanged when there is none)."""
    if "arange" not in text and "mgrid" not in text and "mask" not in text:
        return text
    module = ast.parse(text)
    info = module_info(module)
    lines = text.split("\n")
    taken = ed.taken_names(module)
    edits: list[tuple[int, int, str]] = []
    for fn in [n for n in ast.walk(module) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        edits += _Function(fn, info.aliases, info.constants, text, lines, taken).edits()
    return ed.replace_spans(text, edits)


class _Function:
    def __init__(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, aliases: dict[str, str],
                 constants: dict[str, int], text: str, lines: list[str], taken: set[str]) -> None:
        self.fn, self.aliases, self.text, self.lines, self.taken = fn, aliases, text, lines, taken
        self.stores: dict[str, int] = {}
        for n in ast.walk(fn):
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                self.stores[n.id] = self.stores.get(n.id, 0) + 1
        self.params = {a.arg for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs}
        # names bound once, at the top of the kernel: their values can be substituted in linear forms
        self.values = {s.targets[0].id: s.value for s in fn.body if isinstance(s, ast.Assign) and len(s.targets) == 1
                       and isinstance(s.targets[0], ast.Name) and self.once(s.targets[0].id)}
        self.constants = {k: v for k, v in constants.items() if k not in self.stores and k not in self.params}
        self.index: dict[str, _Index] = {}
        for s in fn.body:
            self._index_definition(s)

    def once(self, name: str) -> bool:
        return self.stores.get(name, 0) == 1 and name not in self.params

    def name_value(self, name: str) -> int | ast.expr | str | None:
        if name in self.values:
            return self.values[name]
        if name in self.constants:
            return self.constants[name]
        return "atom" if self.stores.get(name, 0) <= 1 else None

    def lin(self, e: ast.expr) -> ed.Lin | None:
        return ed.linear(e, self.aliases, self.name_value)

    def _index_definition(self, s: ast.stmt) -> None:
        """``i = nl.arange(n)[:, None]`` / ``[None, :]``, or ``i_p, i_f = nl.mgrid[0:P, 0:F]``."""
        if not isinstance(s, ast.Assign) or len(s.targets) != 1 or not isinstance(s.value, ast.Subscript):
            return
        target, value = s.targets[0], s.value
        if isinstance(target, ast.Name) and isinstance(value.value, ast.Call) and \
                ed.api_name(value.value.func, self.aliases, "language") == "arange":
            call = value.value
            keys = value.slice.elts if isinstance(value.slice, ast.Tuple) else []
            if len(call.args) != 1 or call.keywords or len(keys) != 2 or not self.once(target.id):
                return
            axis = "p" if _is_full(keys[0]) and _is_none(keys[1]) else \
                "f" if _is_none(keys[0]) and _is_full(keys[1]) else ""
            if axis:
                self.index[target.id] = _Index(axis, call.args[0], s)
        elif isinstance(target, ast.Tuple) and len(target.elts) == 2 and \
                ed.api_name(value.value, self.aliases, "language") == "mgrid":
            keys = value.slice.elts if isinstance(value.slice, ast.Tuple) else []
            names = [t.id for t in target.elts if isinstance(t, ast.Name)]
            if len(keys) == 2 and len(names) == 2 and all(self.once(n) for n in names) and all(
                    isinstance(k, ast.Slice) and k.upper is not None and k.step is None and
                    self._is_zero(k.lower) for k in keys):
                for name, axis, key in zip(names, "pf", keys):
                    assert isinstance(key, ast.Slice) and key.upper is not None
                    self.index[name] = _Index(axis, key.upper, s)

    def _is_zero(self, e: ast.expr | None) -> bool:
        return e is None or ed.lin_const(self.lin(e)) == 0

    # -- the rewrite ----------------------------------------------------------------------------------
    def edits(self) -> list[tuple[int, int, str]]:
        if not self.index:
            return []
        loops = [n for n in ast.walk(self.fn) if isinstance(n, ast.For)
                 and ed.names_in(n) & set(self.index)]
        uses = [n for n in ast.walk(self.fn) if isinstance(n, ast.Name) and n.id in self.index
                and isinstance(n.ctx, ast.Load)]
        covered: set[int] = set()
        out: list[tuple[int, int, str]] = []
        for loop in loops:
            if any(ed.names_in(inner) & set(self.index) for inner in ast.walk(loop)
                   if isinstance(inner, ast.For) and inner is not loop):
                raise Refuse  # nested loops over the index arrays: not this idiom
            info = self._loop(loop)
            out += self._loop_edits(info)
            covered |= {id(n) for n in ast.walk(loop)}
        if any(id(u) not in covered for u in uses):
            raise Refuse  # an index array used outside a tiled loop
        definitions = {id(i.stmt): i.stmt for i in self.index.values()}
        for stmt in definitions.values():
            out.append(self._delete(stmt))
        return out

    def _loop(self, loop: ast.For) -> _Loop:
        info = _Loop(loop)
        it = loop.iter
        if not (isinstance(loop.target, ast.Name) and isinstance(it, ast.Call) and len(it.args) == 1
                and not it.keywords and (ed.api_name(it.func, self.aliases, "language") in LOOPS
                                         or (isinstance(it.func, ast.Name) and it.func.id == "range"))):
            raise Refuse
        for s in loop.body:
            if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) and \
                    self._row_shaped(s.value):
                if not self.once(s.targets[0].id):
                    raise Refuse
                info.aliases[s.targets[0].id] = s
                self._rows(s.value, info)
        known = set(self.index) | set(info.aliases)
        parents = {id(c): p for p in ast.walk(loop) for c in ast.iter_child_nodes(p)}
        allowed: set[int] = {id(n) for s in info.aliases.values() for n in ast.walk(s)}
        for node in ast.walk(loop):
            if isinstance(node, ast.Subscript) and ed.names_in(node.slice) & known:
                free = self._access(node, info)
                info.accesses.append((node, free))
                allowed |= {id(n) for n in ast.walk(node.slice)}
            elif isinstance(node, ast.Call):
                mask = next((k for k in node.keywords if k.arg == "mask"), None)
                if mask is not None:
                    self._mask(node, mask, info)
                    allowed |= {id(n) for n in ast.walk(mask)}
        if any(isinstance(n, ast.Name) and n.id in known and id(n) not in allowed for n in ast.walk(loop)):
            raise Refuse  # an index array used as a value (on-chip indexing, arithmetic, a branch...)
        if info.masks:
            self._prove_clamp(info)
            for sub, _ in info.accesses:  # every access is a masked load/store: tiles are all clamped
                call = parents.get(id(sub))
                if not (isinstance(call, ast.Call) and id(call) in info.masked_calls
                        and ed.api_name(call.func, self.aliases, "language") in ("load", "store")):
                    raise Refuse
            self._only_local_tiles(loop)
        return info

    def _row_shaped(self, e: ast.expr) -> bool:
        """``i_p`` or ``<expr> + i_p`` / ``i_p + <expr>``: the value of a row alias."""
        ops = [e.left, e.right] if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add) else [e]
        return any(isinstance(o, ast.Name) and o.id in self.index for o in ops)

    def _rows(self, e: ast.expr, info: _Loop) -> None:
        """``t * P + i_p`` / ``i_p + t * P`` / ``i_p`` (or an alias of one): records the tile's first row."""
        if isinstance(e, ast.Name) and e.id in info.aliases:
            self._rows(info.aliases[e.id].value, info)
            return
        base: ast.expr | None
        if isinstance(e, ast.Name) and e.id in self.index:
            index, base = e.id, None
        elif isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add) and isinstance(e.right, ast.Name) \
                and e.right.id in self.index:
            index, base = e.right.id, e.left
        elif isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add) and isinstance(e.left, ast.Name) \
                and e.left.id in self.index:
            index, base = e.left.id, e.right
        else:
            raise Refuse
        if self.index[index].axis != "p" or (base is not None and ed.names_in(base) & set(self.index)):
            raise Refuse
        if info.p_index and (info.p_index != index or ast.dump(info.base or ast.Constant(0)) !=
                             ast.dump(base or ast.Constant(0))):
            raise Refuse  # one tile per loop: every access starts at the same row
        info.p_index, info.base = index, base

    def _access(self, node: ast.Subscript, info: _Loop) -> str:
        keys = node.slice.elts if isinstance(node.slice, ast.Tuple) else []
        if len(keys) != 2 or not isinstance(node.value, ast.Name) or not isinstance(keys[1], ast.Name) \
                or keys[1].id not in self.index or self.index[keys[1].id].axis != "f":
            raise Refuse
        if not (node.value.id in self.params or self._is_hbm(node.value.id)):
            raise Refuse  # indexing an on-chip tile with index arrays
        self._rows(keys[0], info)
        return keys[1].id

    def _is_hbm(self, name: str) -> bool:
        v = self.values.get(name)
        return isinstance(v, ast.Call) and ed.api_name(v.func, self.aliases, "language") == "ndarray" and any(
            k.arg == "buffer" and ed.api_name(k.value, self.aliases, "language") == "shared_hbm"
            for k in v.keywords)

    def _mask(self, call: ast.Call, mask: ast.keyword, info: _Loop) -> None:
        """``mask=(rows < n)`` (or ``n > rows``) on a row-local call; every mask of the loop alike."""
        cmp = mask.value
        if not (isinstance(cmp, ast.Compare) and len(cmp.ops) == 1 and isinstance(cmp.ops[0], (ast.Lt, ast.Gt))):
            raise Refuse
        rows, bound = (cmp.left, cmp.comparators[0]) if isinstance(cmp.ops[0], ast.Lt) else \
            (cmp.comparators[0], cmp.left)
        self._rows(rows, info)
        if ed.names_in(bound) & (set(self.index) | set(info.aliases)) or (
                info.bound is not None and ast.dump(info.bound) != ast.dump(bound)):
            raise Refuse
        if ed.api_name(call.func, self.aliases, "language") not in MASKABLE_NL and \
                ed.api_name(call.func, self.aliases, "isa") not in MASKABLE_ISA:
            raise Refuse
        info.bound = bound
        info.masks.append((call, mask))
        info.masked_calls.add(id(call))

    def _prove_clamp(self, info: _Loop) -> None:
        """``tile_rows = min(P, n - t * P)`` lies in [1, P] in every iteration: the tile starts at ``t * P``
        and the loop runs ``(n + P - 1) // P`` times."""
        loop = info.node
        assert isinstance(loop.target, ast.Name) and isinstance(loop.iter, ast.Call)
        p = ed.lin_const(self.lin(self.index[info.p_index].size))
        base = self.lin(info.base) if info.base is not None else None
        if p is None or p <= 0 or _nonzero(base) != {loop.target.id: p} or info.bound is None or \
                self.stores.get(loop.target.id) != 1:
            raise Refuse
        count = loop.iter.args[0]
        while isinstance(count, ast.Name) and count.id in self.values:
            count = self.values[count.id]
        n = self.lin(info.bound)
        if not (isinstance(count, ast.BinOp) and isinstance(count.op, ast.FloorDiv) and n is not None
                and ed.lin_const(self.lin(count.right)) == p):
            raise Refuse
        top = self.lin(count.left)
        if top is None or ed.lin_const(ed.lin_sub(top, n)) != p - 1:
            raise Refuse

    def _only_local_tiles(self, loop: ast.For) -> None:
        """Masked tiles have fewer rows in the new API: the loop may not allocate nor read tiles made outside."""
        local = {n.id for n in ast.walk(loop) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for n in ast.walk(loop):
            if isinstance(n, ast.Call) and (ed.api_name(n.func, self.aliases, "language") in (
                    "ndarray", "zeros", "ones", "full", "zeros_like", "empty_like", "ones_like", "full_like", "rand")
                                            or ed.api_name(n.func, self.aliases, "isa") in ("memset", "iota")):
                raise Refuse
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in local \
                    and n.id not in self.params and n.id not in self.aliases and not self._is_hbm(n.id) \
                    and n.id not in self.index and n.id not in self.constants and not self._is_scalar(n.id):
                raise Refuse

    def _is_scalar(self, name: str, depth: int = 0) -> bool:
        """A name bound once to a Python number: a constant, shape arithmetic, ``nl.tile_size``."""
        if not self.once(name) or depth > 16:
            return False
        v = self.values.get(name)
        if v is None:  # bound once by unpacking a shape: ``n, d = a.shape``
            return any(isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Tuple) and
                       isinstance(s.value, ast.Attribute) and s.value.attr == "shape" and
                       name in ed.names_in(s.targets[0]) for s in self.fn.body)
        return self._number(v, depth)

    def _number(self, e: ast.expr, depth: int) -> bool:
        if isinstance(e, ast.Constant):
            return type(e.value) in (int, float)
        if isinstance(e, ast.Name):
            return e.id in self.constants or self._is_scalar(e.id, depth + 1)
        if isinstance(e, ast.BinOp):
            return self._number(e.left, depth) and self._number(e.right, depth)
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.USub, ast.UAdd)):
            return self._number(e.operand, depth)
        if isinstance(e, ast.Subscript) and isinstance(e.value, ast.Attribute) and e.value.attr == "shape":
            return isinstance(e.slice, ast.Constant) and type(e.slice.value) is int
        return (ed.qual(e, self.aliases) or "").startswith(("neuronxcc.nki.language.tile_size.",
                                                          "nki.language.tile_size."))

    def _loop_edits(self, info: _Loop) -> list[tuple[int, int, str]]:
        text, lines = self.text, self.lines
        out: list[tuple[int, int, str]] = []
        p_text = ed.segment(text, lines, self.index[info.p_index].size) if info.p_index else ""
        base_text = _operand(text, lines, info.base) if info.base is not None else ""
        size = p_text
        aliases = sorted(info.aliases.values(), key=lambda s: s.lineno)
        if info.masks:
            size = ed.fresh("tile_rows", self.taken)
            assert info.bound is not None and info.base is not None
            base = f"({base_text})" if isinstance(info.base, ast.BinOp) and isinstance(info.base.op, (ast.Add, ast.Sub)) \
                else base_text
            clamp = f"{size} = min({p_text}, {_operand(text, lines, info.bound)} - {base})"
            first = aliases[0] if aliases else info.node.body[0]
            uses = [n for n, _ in info.accesses] + [k for _, k in info.masks]
            if not ed.own_lines(lines, first) or any((u.lineno, u.col_offset) < (first.lineno, first.col_offset)
                                                     for u in uses):
                raise Refuse
            start = ed.offset(lines, first.lineno, first.col_offset)
            if aliases:  # the first alias line becomes the clamp
                aliases = aliases[1:]
                end_line = first.end_lineno or first.lineno
                out.append((start, ed.offset(lines, end_line, len(ed.line_bytes(lines, end_line))), clamp))
            else:
                out.append((start, start, clamp + "\n" + " " * first.col_offset))
        for stmt in aliases:
            out.append(self._delete(stmt))
        for sub, free in info.accesses:
            rows = f"{base_text}:{base_text} + {size}" if base_text else f"0:{size}"
            cols = f"0:{ed.segment(text, lines, self.index[free].size)}"
            out.append((*ed.char_range(lines, sub.slice), f"{rows}, {cols}"))
        for call, mask in info.masks:
            out.append(self._drop_keyword(call, mask))
        return out

    def _drop_keyword(self, call: ast.Call, kw: ast.keyword) -> tuple[int, int, str]:
        args: list[ast.expr | ast.keyword] = sorted([*call.args, *call.keywords], key=lambda a: (a.lineno, a.col_offset))
        k = next(n for n, a in enumerate(args) if a is kw)
        if k + 1 < len(args):  # `f(a, mask=m, b)` -> `f(a, b)`
            return ed.char_range(self.lines, kw)[0], ed.char_range(self.lines, args[k + 1])[0], ""
        start = ed.char_range(self.lines, args[k - 1])[1] if k else ed.char_range(self.lines, kw)[0]
        return start, ed.char_range(self.lines, call)[1] - 1, ""  # up to the closing parenthesis

    def _delete(self, stmt: ast.stmt) -> tuple[int, int, str]:
        if not ed.own_lines(self.lines, stmt):
            raise Refuse
        end_line = stmt.end_lineno or stmt.lineno
        return ed.offset(self.lines, stmt.lineno, 0), ed.offset(self.lines, end_line + 1, 0), ""


def _operand(text: str, lines: list[str], e: ast.expr) -> str:
    """The source of ``e``, parenthesised unless it binds at least as tightly as ``+``."""
    seg = ed.segment(text, lines, e)
    tight = (ast.Name, ast.Constant, ast.Attribute, ast.Subscript, ast.Call)
    arith = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
    return seg if isinstance(e, tight) or (isinstance(e, ast.BinOp) and isinstance(e.op, arith)) else f"({seg})"


def _nonzero(v: ed.Lin | None) -> ed.Lin | None:
    return None if v is None else {k: c for k, c in v.items() if c}


def _is_full(e: ast.expr) -> bool:
    return isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None


def _is_none(e: ast.expr) -> bool:
    return isinstance(e, ast.Constant) and e.value is None
