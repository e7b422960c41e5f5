"""Abstract interpretation of one kernel function: walks statements in order, tracks what is known
about each name, and reports NKI events (allocations, calls, subscripts, truth tests) to the rules.

Loops are walked once with an unknown induction variable; branches are walked separately and joined.
Nothing here decides what is an error: rules do, from the events. The shapes of call results, views and
slices are ``shapes.py``'s (pure functions of the values this walk evaluates).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Callable

from .shapes import allocation_shape, arange_index, call_result, index_subscript, slice_extent, tile_subscript
from .values import (UNKNOWN, BufferV, DsV, DtypeV, IndexV, IntV, ParDimV, ShapeV, TileV, TupleV, UnknownV, Value, broadcast,
                     is_arange_index, join, known_int)

from nki_agent.toolchain.facts import nki_api

# nl.tile_size constants (NKI tiling overview); the same on every target.
TILE_SIZE = {"pmax": 128, "psum_fmax": 512, "psum_bank_fmax": 512, "gemm_stationary_fmax": 128,
             "gemm_moving_fmax": 512, "bn_stats_fmax": 512}
DTYPE_BYTES = {"float32": 4, "tfloat32": 4, "int32": 4, "uint32": 4, "float16": 2, "bfloat16": 2, "int16": 2,
               "uint16": 2, "int8": 1, "uint8": 1, "bool_": 1, "float8_e4m3": 1, "float8_e5m2": 1,
               "float8_e4m3fn": 1, "fp32": 4, "bf16": 2, "fp16": 2}
# APIs whose result is certainly a tile (everything else, e.g. program_id or get_nc_version, is not): the NKI
# API table's (toolchain/facts/nki_api.py), per generation; a "mixed" file counts the classic ISA forms
NL_TILE_RESULTS = nki_api.tile_results("nl", "classic") | nki_api.tile_results("nl", "new")
CLASSIC_ISA_TILE_RESULTS = nki_api.tile_results("nisa", "classic")
NEW_ISA_TILE_RESULTS = nki_api.tile_results("nisa", "new")
ALLOCATORS = nki_api.allocators()
LOOPS = {"affine_range", "sequential_range", "static_range", "range", "tile_range", "dynamic_range"}
_API: dict[str, tuple[str, str] | None] = {}  # qualified name -> api(); a kernel file names ~100 distinct ones
_API_MAX = 65536  # bound for hostile files that name endless distinct attributes
MAX_STATEMENTS = 200_000  # bound on statements walked per function (a generated 50 MB file stays fast)


@dataclass
class Event:
    """Something a rule may care about, with the facts known at that point."""

    kind: str  # alloc | call | subscript | truth | loop
    node: ast.AST
    facts: dict[str, Any]


@dataclass
class Context:
    """Per-file facts shared by every function: aliases, constants, API generation, settings."""

    aliases: dict[str, str]
    constants: dict[str, int]
    generation: str
    is_kernel: bool = True
    loops: list[tuple[str, ast.AST]] = field(default_factory=list)
    param_shapes: dict[str, tuple[int | None, ...]] = field(default_factory=dict)


class Interpreter:
    def __init__(self, ctx: Context, emit: Callable[[Event], None]) -> None:
        self.ctx = ctx
        self.emit = emit
        self.env: dict[str, Value] = {}
        self.budget = MAX_STATEMENTS

    # -- names ---------------------------------------------------------------------------------
    def qualname(self, node: ast.AST) -> str | None:
        """``nl.load`` -> ``neuronxcc.nki.language.load`` (or ``nki.language.load``) through the imports."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id in self.env:
            return None
        root = self.ctx.aliases.get(node.id)
        if root is None:
            return None
        return ".".join([root] + parts[::-1])

    @staticmethod
    def api(qual: str | None) -> tuple[str, str] | None:
        """(namespace, name) for NKI APIs: namespace is 'nl', 'nisa', 'nki' or 'nt'."""
        if qual is None:
            return None
        found = _API.get(qual, False)
        if found is False:
            found = nki_api.api_of(qual)
            if len(_API) < _API_MAX:
                _API[qual] = found
        return found  # type: ignore[return-value]

    # -- entry -----------------------------------------------------------------------------------
    def run(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for arg in fn.args.args + fn.args.kwonlyargs:
            self.env[arg.arg] = self.param(arg) if self.ctx.is_kernel else UNKNOWN
        if fn.args.vararg:
            self.env[fn.args.vararg.arg] = UNKNOWN
        if fn.args.kwarg:
            self.env[fn.args.kwarg.arg] = UNKNOWN
        self.block(fn.body)

    def param(self, arg: ast.arg) -> Value:
        shape: tuple[int | None, ...] | None = self.ctx.param_shapes.get(arg.arg)
        ann = arg.annotation
        if isinstance(ann, ast.Subscript) and self.api(self.qualname(ann.value)) in (("nt", "tensor"),
                                                                                      ("nt", "mutable_tensor")):
            dims = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            vals = [known_int(self.expr(d)) for d in dims]
            shape = tuple(vals)
        declared = shape is not None
        return TileV(shape, None, "hbm", arg, arg.arg, True, certain=declared)

    # -- statements --------------------------------------------------------------------------------
    def block(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self.budget -= 1
            if self.budget <= 0:
                return
            self.stmt(stmt)

    def stmt(self, s: ast.stmt) -> None:
        if isinstance(s, ast.Assign):
            value = self.expr(s.value)
            for t in s.targets:
                self.bind(t, value)
        elif isinstance(s, ast.AnnAssign):
            value = self.expr(s.value) if s.value is not None else UNKNOWN
            self.bind(s.target, value)
        elif isinstance(s, ast.AugAssign):
            self.expr(s.value)
            if isinstance(s.target, ast.Name):
                cur = self.env.get(s.target.id, UNKNOWN)
                self.env[s.target.id] = cur if isinstance(cur, TileV) else (IntV(None) if isinstance(cur, IntV) else UNKNOWN)
            else:
                self.expr(s.target)
        elif isinstance(s, ast.Expr):
            self.expr(s.value)
        elif isinstance(s, ast.Return) and s.value is not None:
            self.expr(s.value)
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            self.loop(s)
        elif isinstance(s, ast.While):
            self.truth(s.test, "while")
            self.merge_body(s.body)
            self.block(s.orelse)
        elif isinstance(s, ast.If):
            self.truth(s.test, "if")
            before = dict(self.env)
            self.block(s.body)
            after_then = self.env
            self.env = dict(before)
            self.block(s.orelse)
            self.env = {k: join(after_then.get(k, UNKNOWN), v) for k, v in self.env.items()} | \
                {k: UNKNOWN for k in after_then if k not in self.env}
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                self.expr(item.context_expr)
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, UNKNOWN)
            self.block(s.body)
        elif isinstance(s, ast.Try):
            self.block(s.body)
            for h in s.handlers:
                self.block(h.body)
            self.block(s.orelse)
            self.block(s.finalbody)
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self.env[s.name] = UNKNOWN
        elif isinstance(s, ast.Assert):
            self.assertion(s)

    def assertion(self, s: ast.Assert) -> None:
        """An ``assert``: its test is evaluated (a subclass may read what it implies)."""
        self.expr(s.test)

    def loop(self, s: ast.For | ast.AsyncFor) -> None:
        kind = ""
        if isinstance(s.iter, ast.Call):
            q = self.api(self.qualname(s.iter.func))
            if q is not None and q[1] in LOOPS:
                kind = q[1]
            elif isinstance(s.iter.func, ast.Name) and s.iter.func.id == "range":
                kind = "python_range"
            for a in s.iter.args:
                self.expr(a)
        else:
            self.expr(s.iter)
        self.bind(s.target, IntV(None) if kind else UNKNOWN)
        self.emit(Event("loop", s, {"kind": kind}))
        self.ctx.loops.append((kind, s))
        try:
            self.merge_body(s.body)
        finally:
            self.ctx.loops.pop()
        self.block(s.orelse)

    def merge_body(self, body: list[ast.stmt]) -> None:
        """Walk a loop body once; names it rebinds keep only facts that hold on entry too."""
        before = dict(self.env)
        self.block(body)
        for k, v in list(self.env.items()):
            if k in before and before[k] != v:
                self.env[k] = join(before[k], v)

    def bind(self, target: ast.expr, value: Value) -> None:
        if isinstance(target, ast.Name):
            self.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            items: tuple[Value, ...] | None = None
            if isinstance(value, TupleV):
                items = value.items
            elif isinstance(value, ShapeV) and value.dims is not None:
                items = tuple(IntV(d) for d in value.dims)
            for k, elt in enumerate(target.elts):
                if isinstance(elt, ast.Starred):
                    self.bind(elt.value, UNKNOWN)
                    items = None
                    continue
                self.bind(elt, items[k] if items is not None and k < len(items) and
                          len(items) == len(target.elts) else UNKNOWN)
        elif isinstance(target, ast.Subscript):
            self.expr(target)
        elif isinstance(target, ast.Starred):
            self.bind(target.value, UNKNOWN)

    # -- expressions ---------------------------------------------------------------------------------
    def truth(self, test: ast.expr, where: str) -> None:
        value = self.expr(test)
        if is_arange_index(value) or (isinstance(value, TileV) and value.certain):
            self.emit(Event("truth", test, {"value": value, "where": where}))

    def expr(self, e: ast.expr | None) -> Value:
        # dispatch on the node's exact type: an isinstance chain costs a dozen calls per Call node
        handler = _EXPR.get(type(e))
        if handler is not None:
            return handler(self, e)
        if e is None:
            return UNKNOWN
        for child in ast.iter_child_nodes(e):
            if isinstance(child, ast.expr):
                self.expr(child)
        return UNKNOWN

    def constant(self, e: ast.Constant) -> Value:
        value = e.value
        return IntV(value) if type(value) is int else UNKNOWN  # bool is not an int here

    def name(self, e: ast.Name) -> Value:
        value = self.env.get(e.id)
        if value is not None:
            return value
        const = self.ctx.constants.get(e.id)
        return UNKNOWN if const is None else IntV(const)

    def unaryop(self, e: ast.UnaryOp) -> Value:
        v = self.expr(e.operand)
        if isinstance(e.op, ast.Not) and (is_arange_index(v) or (isinstance(v, TileV) and v.certain)):
            self.emit(Event("truth", e, {"value": v, "where": "not"}))
        if isinstance(e.op, ast.USub) and known_int(v) is not None:
            return IntV(-known_int(v))  # type: ignore[operator]
        return IntV(None) if isinstance(v, IntV) else UNKNOWN

    def boolop(self, e: ast.BoolOp) -> Value:
        for operand in e.values:
            v = self.expr(operand)
            if is_arange_index(v) or (isinstance(v, TileV) and v.certain):
                self.emit(Event("truth", e, {"value": v, "where": "and" if isinstance(e.op, ast.And) else "or",
                                              "operand": operand}))
        return UNKNOWN

    def compare(self, e: ast.Compare) -> Value:
        vals = [self.expr(e.left)] + [self.expr(c) for c in e.comparators]
        if any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in e.ops) or any(
                isinstance(c, ast.Constant) and c.value is None for c in [e.left] + e.comparators):
            return UNKNOWN  # identity / None / membership tests are compile-time Python
        if any(isinstance(v, IndexV) for v in vals):
            return IndexV(None, e, grid=not any(is_arange_index(v) for v in vals))  # a mask
        return TileV(None, None, "sbuf", e) if any(isinstance(v, TileV) and v.certain for v in vals) else UNKNOWN

    def sequence(self, e: ast.Tuple | ast.List) -> Value:
        return TupleV(tuple([self.expr(x) for x in e.elts]))

    def ifexp(self, e: ast.IfExp) -> Value:
        self.truth(e.test, "ifexp")
        return join(self.expr(e.body), self.expr(e.orelse))

    def attribute(self, e: ast.Attribute) -> Value:
        q = self.api(self.qualname(e))
        if q is not None:
            ns, name = q
            if ns == "nl" and name.startswith("tile_size."):
                v = TILE_SIZE.get(name.split(".", 1)[1])
                return IntV(v) if v is not None else IntV(None)
            if ns == "nl" and name in ("sbuf", "psum", "hbm", "shared_hbm", "private_hbm"):
                return BufferV({"shared_hbm": "hbm", "private_hbm": "hbm"}.get(name, name), name == "shared_hbm")
            if ns == "nl" and name in DTYPE_BYTES:
                return DtypeV(name)
            return UNKNOWN
        base = self.expr(e.value)
        if isinstance(base, TileV):
            if e.attr == "shape":
                return ShapeV(base.shape)
            if e.attr == "dtype":
                return DtypeV(base.dtype) if base.dtype else UNKNOWN
            if e.attr == "ndim" and base.shape is not None:
                return IntV(len(base.shape))
        return UNKNOWN

    def binop(self, e: ast.BinOp) -> Value:
        a, b = self.expr(e.left), self.expr(e.right)
        if isinstance(a, IndexV) or isinstance(b, IndexV):
            nd = [v.ndim for v in (a, b) if isinstance(v, IndexV)]
            idx = [v for v in (a, b) if isinstance(v, IndexV)]
            other_ok = all(isinstance(v, (IndexV, IntV)) for v in (a, b))  # index op int keeps the index's shape
            return IndexV(max((n for n in nd if n is not None), default=None) if None not in nd else None, e,
                          broadcast([v.shape for v in idx]) if other_ok else None,
                          not any(is_arange_index(v) for v in idx))
        if (isinstance(a, TileV) and a.certain) or (isinstance(b, TileV) and b.certain):
            t = a if isinstance(a, TileV) else b
            assert isinstance(t, TileV)
            if isinstance(a, TileV) and isinstance(b, TileV):
                shape = broadcast([a.shape, b.shape])
            else:
                other = b if t is a else a
                shape = t.shape if isinstance(other, IntV) or (isinstance(other, UnknownV) and not isinstance(
                    other, TileV)) else None
            return TileV(shape, None, "sbuf", e)
        if isinstance(a, TileV) or isinstance(b, TileV):
            return UNKNOWN
        x, y = known_int(a), known_int(b)
        if x is None or y is None:
            return IntV(None) if isinstance(a, IntV) and isinstance(b, IntV) else UNKNOWN
        try:
            if isinstance(e.op, ast.Add):
                return IntV(x + y)
            if isinstance(e.op, ast.Sub):
                return IntV(x - y)
            if isinstance(e.op, ast.Mult):
                return IntV(x * y)
            if isinstance(e.op, ast.FloorDiv) and y:
                return IntV(x // y)
            if isinstance(e.op, ast.Mod) and y:
                return IntV(x % y)
            if isinstance(e.op, ast.Pow) and 0 <= y < 64 and abs(x) < 1 << 16:
                return IntV(x ** y)
        except (OverflowError, ValueError):
            pass
        return IntV(None)

    def subscript(self, e: ast.Subscript) -> Value:
        base = self.expr(e.value)
        keys = e.slice.elts if isinstance(e.slice, ast.Tuple) else [e.slice]
        if isinstance(base, ShapeV):
            k = known_int(self.expr(e.slice))
            if base.dims is not None and k is not None and -len(base.dims) <= k < len(base.dims):
                return IntV(base.dims[k])
            return IntV(None)
        if isinstance(base, TupleV):
            k = known_int(self.expr(e.slice))
            if k is not None and -len(base.items) <= k < len(base.items):
                return base.items[k]
            return UNKNOWN
        if isinstance(base, IndexV):
            return index_subscript(base, e, keys)
        if self._is_mgrid(e.value):
            return self.mgrid(e, keys)
        kinds = []
        dims: list[int | None] = []
        index_shapes: list[tuple[int | None, ...] | None] = []
        for key in keys:
            if isinstance(key, ast.Slice):
                kinds.append("slice")
                dims.append(self._slice_extent(key, base, len(dims)))
            else:
                v = self.expr(key)
                if isinstance(v, IndexV):
                    kinds.append("index")
                    dims.append(None)
                    index_shapes.append(v.shape)
                elif isinstance(key, ast.Constant) and key.value is Ellipsis:
                    kinds.append("ellipsis")
                    dims.append(None)
                elif isinstance(v, DsV):
                    kinds.append("slice")
                    dims.append(v.size)
                else:
                    kinds.append("int" if isinstance(v, IntV) else "other")
                    dims.append(None)
                    if isinstance(v, IntV):
                        index_shapes.append(())
        if isinstance(base, TileV):
            self.emit(Event("subscript", e, {"tile": base, "kinds": kinds,
                                             "index_values": [self.expr(k) if not isinstance(k, ast.Slice) else None
                                                              for k in keys]}))
            return tile_subscript(base, kinds, dims, index_shapes)
        return UNKNOWN

    def _slice_extent(self, key: ast.Slice, base: Value, axis: int) -> int | None:
        """``shapes.slice_extent`` of ``key``, its bounds evaluated here once each (their events reach the rules
        once)."""
        step = known_int(self.expr(key.step)) if key.step is not None else 1
        lo = known_int(self.expr(key.lower)) if key.lower is not None else 0
        hi = known_int(self.expr(key.upper)) if key.upper is not None else None
        return slice_extent(key, step, lo, hi, base, axis, self._int_leaf)

    def _int_leaf(self, e: ast.expr) -> IntV | None:
        """The integer a name or an ``nl.tile_size`` constant is, for probing a slice's extent (``IntV(None)``:
        an unknown int, probed; None: not an integer)."""
        if isinstance(e, ast.Name):
            v = self.env.get(e.id)
            if v is None:
                return IntV(self.ctx.constants.get(e.id))
            return v if isinstance(v, IntV) else None
        if isinstance(e, ast.Attribute):
            q = self.api(self.qualname(e))
            if q is not None and q[0] == "nl" and q[1].startswith("tile_size."):
                size = TILE_SIZE.get(q[1].split(".", 1)[1])
                return IntV(size) if size is not None else None
        return None

    def _is_mgrid(self, node: ast.expr) -> bool:
        return isinstance(node, ast.Attribute) and self.api(self.qualname(node)) == ("nl", "mgrid")

    def mgrid(self, e: ast.Subscript, keys: list[ast.expr]) -> Value:
        """``nl.mgrid[0:P, 0:F]``: one index array per axis, each of the grid's full shape."""
        dims = []
        for key in keys:
            if not isinstance(key, ast.Slice):
                return UNKNOWN
            dims.append(self._slice_extent(key, UNKNOWN, 0))
        shape = tuple(dims)
        return TupleV(tuple(IndexV(len(shape), e, shape, grid=True) for _ in keys))

    def call(self, e: ast.Call) -> Value:
        q = self.api(self.qualname(e.func))
        args = [self.expr(a) for a in e.args]
        kwargs = {k.arg: self.expr(k.value) for k in e.keywords if k.arg is not None}
        if q is None:
            if isinstance(e.func, ast.Attribute):
                self.expr(e.func.value)
            return UNKNOWN
        ns, name = q
        facts = {"ns": ns, "name": name, "args": args, "kwargs": kwargs, "loops": list(self.ctx.loops)}
        self.emit(Event("call", e, facts))
        if ns == "nl" and name in ALLOCATORS:
            return self.allocation(e, name, args, kwargs)
        if ns == "nl" and name == "arange":
            return arange_index(e, args)
        if ns == "nl" and name == "ds":
            size = args[1] if len(args) > 1 else kwargs.get("size", UNKNOWN)
            return DsV(known_int(size))
        if ns == "nl" and name == "par_dim":
            return ParDimV(known_int(args[0]) if args else None)
        generation = "new" if self.ctx.generation == "new" else "classic"
        if ns == "nisa" and name not in (CLASSIC_ISA_TILE_RESULTS if generation == "classic" else NEW_ISA_TILE_RESULTS):
            return UNKNOWN
        if ns not in ("nl", "nisa") or (ns == "nl" and name not in NL_TILE_RESULTS):
            return UNKNOWN
        row = nki_api.row(ns, name)
        if row is None:
            return UNKNOWN
        return call_result(e, row, generation, args, kwargs)

    def allocation(self, e: ast.Call, name: str, args: list[Value], kwargs: dict[str, Value]) -> Value:
        like = name.endswith("_like")
        shape_v = args[0] if args else kwargs.get("shape", UNKNOWN)
        shape, tile_shape, tile_par = allocation_shape(shape_v, like)
        dtype_pos = 2 if name == "full" else 1
        dtype_v = kwargs.get("dtype", args[dtype_pos] if len(args) > dtype_pos else UNKNOWN)
        buf_v = kwargs.get("buffer", UNKNOWN)
        par_dim = self._par_dim_axis(e)
        buffer = buf_v.kind if isinstance(buf_v, BufferV) else ("sbuf" if "buffer" not in kwargs and not like else None)
        dtype = dtype_v.name if isinstance(dtype_v, DtypeV) else None
        facts = {"name": name, "shape": shape, "dtype": dtype, "buffer": buffer, "par_axis": par_dim,
                 "shared": isinstance(buf_v, BufferV) and buf_v.shared, "loops": list(self.ctx.loops)}
        self.emit(Event("alloc", e, facts))
        label = ""
        for k in e.keywords:
            if k.arg == "name" and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str):
                label = k.value.value
        return TileV(tile_shape, dtype, buffer, e, label, par_axis=tile_par)

    def _par_dim_axis(self, e: ast.Call) -> int | None:
        first = e.args[0] if e.args else None
        if isinstance(first, ast.Tuple):
            for k, elt in enumerate(first.elts):
                if isinstance(elt, ast.Call):
                    q = self.api(self.qualname(elt.func))
                    if q == ("nl", "par_dim"):
                        return k
        return None


_EXPR: dict[type, Callable[[Interpreter, Any], Value]] = {
    ast.Constant: Interpreter.constant, ast.Name: Interpreter.name, ast.Attribute: Interpreter.attribute,
    ast.BinOp: Interpreter.binop, ast.UnaryOp: Interpreter.unaryop, ast.BoolOp: Interpreter.boolop,
    ast.Compare: Interpreter.compare, ast.Tuple: Interpreter.sequence, ast.List: Interpreter.sequence,
    ast.Subscript: Interpreter.subscript, ast.Call: Interpreter.call, ast.IfExp: Interpreter.ifexp}
