"""Abstract interpretation of one kernel function: walks statements in order, tracks what is known
about each name, and reports NKI events (allocations, calls, subscripts, truth tests) to the rules.

Loops are walked once with an unknown induction variable; branches are walked separately and joined.
Nothing here decides what is an error: rules do, from the events.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Callable

from .values import (UNKNOWN, BufferV, DsV, DtypeV, IndexV, IntV, ParDimV, ShapeV, TileV, TupleV, UnknownV, Value, broadcast,
                     is_arange_index, join, known_int)

from ...toolchain import nki_api

# nl.tile_size constants (NKI tiling overview); the same on every target.
TILE_SIZE = {"pmax": 128, "psum_fmax": 512, "psum_bank_fmax": 512, "gemm_stationary_fmax": 128,
             "gemm_moving_fmax": 512, "bn_stats_fmax": 512}
DTYPE_BYTES = {"float32": 4, "tfloat32": 4, "int32": 4, "uint32": 4, "float16": 2, "bfloat16": 2, "int16": 2,
               "uint16": 2, "int8": 1, "uint8": 1, "bool_": 1, "float8_e4m3": 1, "float8_e5m2": 1,
               "float8_e4m3fn": 1, "fp32": 4, "bf16": 2, "fp16": 2}
# APIs whose result is certainly a tile (everything else, e.g. program_id or get_nc_version, is not): the NKI
# API table's (toolchain/nki_api.py), per generation; a "mixed" file counts the classic ISA forms
NL_TILE_RESULTS = nki_api.tile_results("nl", "classic") | nki_api.tile_results("nl", "new")
CLASSIC_ISA_TILE_RESULTS = nki_api.tile_results("nisa", "classic")
NEW_ISA_TILE_RESULTS = nki_api.tile_results("nisa", "new")
ALLOCATORS = nki_api.allocators()
LOOPS = {"affine_range", "sequential_range", "static_range", "range", "tile_range", "dynamic_range"}
_API: dict[str, tuple[str, str] | None] = {}  # qualified name -> api(); a kernel file names ~100 distinct ones
_API_MAX = 65536  # bound for hostile files that name endless distinct attributes
_PROBES = (0, 1, 2, 5, 11)  # values tried for unknown ints when measuring a slice's extent (hi - lo)
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
            # nl.arange(n)[:, None] adds axes: count the entries that are None or slices
            n_axes = sum(1 for k in keys if isinstance(k, (ast.Slice,)) or (isinstance(k, ast.Constant) and k.value is None))
            shape: tuple[int | None, ...] | None = None
            if base.shape is not None and len(base.shape) == 1 and n_axes:
                shape = tuple(base.shape[0] if isinstance(k, ast.Slice) else 1 for k in keys)
            return IndexV(n_axes if n_axes else None, e, shape, base.grid)
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
            out: tuple[int | None, ...] | None = None
            if base.shape is not None and len(kinds) < len(base.shape) and all(kd in ("slice", "int") for kd in kinds):
                rest = base.shape[len(kinds):]  # ``z[0]``: the missing trailing axes are taken whole
                kinds, dims = kinds + ["slice"] * len(rest), dims + list(rest)
            full = base.shape is None or len(kinds) == len(base.shape)
            if kinds and all(kd == "slice" for kd in kinds) and full:
                out = tuple(dims)  # with an unknown base rank, dim 0 (the partition dim) is still exact
            elif "index" in kinds and all(kd in ("index", "int") for kd in kinds) and full:
                out = broadcast(index_shapes)  # advanced indexing: the index arrays broadcast together
            elif kinds and all(kd in ("slice", "int") for kd in kinds) and base.shape is not None and full:
                out = tuple(d for d, kd in zip(dims, kinds) if kd == "slice")  # an int index drops its axis
            par = base.par_axis - sum(1 for kd in kinds[:base.par_axis] if kd == "int")
            return TileV(out, base.dtype, base.buffer, base.origin, base.name, base.is_param, base.certain,
                         par if out is not None and 0 <= par < len(out) else 0)
        return UNKNOWN

    def _slice_extent(self, key: ast.Slice, base: Value, axis: int) -> int | None:
        """``hi - lo`` of a step-1 slice when it is the same number for every value of the unknown ints in it
        (``x[i * 128:(i + 1) * 128]`` is 128 rows); an open end is the base's dim. Each bound is evaluated
        once (its events reach the rules once)."""
        step = known_int(self.expr(key.step)) if key.step is not None else 1
        lo = known_int(self.expr(key.lower)) if key.lower is not None else 0
        hi = known_int(self.expr(key.upper)) if key.upper is not None else None
        if step != 1:
            return None
        if key.upper is None:
            dim = base.shape[axis] if isinstance(base, TileV) and base.shape is not None and axis < len(base.shape) \
                else None
            return dim - lo if dim is not None and lo is not None and 0 <= lo <= dim else None
        if hi is not None and lo is not None:
            return hi - lo if hi >= lo >= 0 else None
        extents = set()
        for probe in _PROBES:
            upper = self._probe(key.upper, probe)
            lower = self._probe(key.lower, probe) if key.lower is not None else 0
            if upper is None or lower is None:
                return None
            extents.add(upper - lower)
        extent = extents.pop() if len(extents) == 1 else None
        return extent if extent is not None and extent >= 0 else None

    def _probe(self, e: ast.expr, probe: int, depth: int = 0) -> int | None:
        """``e`` with every unknown int name set to ``probe`` (None: not an integer expression)."""
        if depth > 32:
            return None
        if isinstance(e, ast.Constant):
            return e.value if type(e.value) is int else None
        if isinstance(e, ast.Name):
            v = self.env.get(e.id)
            if v is None:
                const = self.ctx.constants.get(e.id)
                return const if const is not None else probe
            return (v.value if v.value is not None else probe) if isinstance(v, IntV) else None
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
            x = self._probe(e.operand, probe, depth + 1)
            return -x if x is not None else None
        if isinstance(e, ast.BinOp):
            x, y = self._probe(e.left, probe, depth + 1), self._probe(e.right, probe, depth + 1)
            if x is None or y is None or abs(x) > 1 << 40 or abs(y) > 1 << 40:
                return None
            if isinstance(e.op, ast.Add):
                return x + y
            if isinstance(e.op, ast.Sub):
                return x - y
            if isinstance(e.op, ast.Mult):
                return x * y
            return None  # // and % are not linear: no claim
        if isinstance(e, ast.Attribute):
            q = self.api(self.qualname(e))
            if q is not None and q[0] == "nl" and q[1].startswith("tile_size."):
                return TILE_SIZE.get(q[1].split(".", 1)[1])
            return None
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
            n = [known_int(a) for a in args]
            extent: int | None = None
            if len(n) == 1:
                extent = n[0]
            elif len(n) == 2 and n[0] is not None and n[1] is not None:
                extent = n[1] - n[0]
            return IndexV(1, e, (extent if extent is None or extent >= 0 else None,))
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
        return self.result(e, row, generation, args, kwargs)

    def result(self, e: ast.Call, row: nki_api.ApiRow, generation: str, args: list[Value],
               kwargs: dict[str, Value]) -> TileV:
        """The tile an API call returns, as far as its arguments say (the table's ``result`` kind)."""
        params = row.params(generation)
        bound: dict[str, Value] = dict(zip(params, args)) | kwargs
        tiles = [v for k, v in bound.items() if isinstance(v, TileV) and k not in ("mask", "reduce_res", "dst")]
        first = tiles[0] if tiles else None
        kind = row.result_in(generation)
        dtype_v = bound.get("dtype")
        dtype = dtype_v.name if isinstance(dtype_v, DtypeV) else None
        buf_v = bound.get("buffer")
        buffer = buf_v.kind if isinstance(buf_v, BufferV) else row.buffer
        shape: tuple[int | None, ...] | None = None
        if kind == "same" and row.like is not None:
            src = bound.get(row.like)
            shape = src.shape if isinstance(src, TileV) else None
            dtype = dtype or (src.dtype if isinstance(src, TileV) else None)
        elif kind == "same":
            shape = broadcast([t.shape for t in tiles]) if tiles else None
            if dtype is None and tiles and len({t.dtype for t in tiles}) == 1:
                dtype = first.dtype if first is not None else None
        elif kind == "load":
            src = bound.get("src")
            shape = src.shape if isinstance(src, TileV) else None
            dtype = dtype or (src.dtype if isinstance(src, TileV) else None)
        elif kind == "transpose":
            src = first
            shape = src.shape[::-1] if src is not None and src.shape is not None and len(src.shape) == 2 else None
            dtype = dtype or (src.dtype if src is not None else None)
        elif kind == "reduce":
            shape = self._reduced(e, first, bound)
            dtype = dtype or (first.dtype if first is not None else None)
        elif kind == "matmul":
            shape, dtype = self._matmul_shape(e, row, bound), "float32"
        elif kind == "broadcast":
            shape = self._shape_of(bound.get("shape", UNKNOWN))
            dtype = dtype or (first.dtype if first is not None else None)
        elif kind == "memset":
            shape = self._shape_of(bound.get("shape", UNKNOWN))
        elif kind == "rows":
            p = first.shape[0] if first is not None and first.shape else None
            shape = (p, row.free) if p is not None and row.free is not None else None
        elif kind == "identity":
            n = known_int(bound.get("n", UNKNOWN))
            shape = (n, n) if n is not None else None
        elif kind == "iota":
            expr = bound.get("expr")
            shape = expr.shape if isinstance(expr, IndexV) else None
        return TileV(shape, dtype, buffer, e)

    @staticmethod
    def _shape_of(v: Value) -> tuple[int | None, ...] | None:
        if isinstance(v, TupleV):
            return tuple(x.value if isinstance(x, (IntV, ParDimV)) else None for x in v.items)
        if isinstance(v, ShapeV):
            return v.dims
        return None

    def _reduced(self, e: ast.Call, x: TileV | None, bound: dict[str, Value]) -> tuple[int | None, ...] | None:
        if x is None or x.shape is None:
            return None
        axis_v = bound.get("axis")
        axes_v = axis_v.items if isinstance(axis_v, TupleV) else (axis_v,) if axis_v is not None else ()
        axes = [known_int(a) for a in axes_v]
        if not axes or None in axes:
            return None
        rank = len(x.shape)
        norm = {a + rank if a < 0 else a for a in axes if a is not None}
        if any(not 0 <= a < rank for a in norm):
            return None
        keep = next((k.value for k in e.keywords if k.arg == "keepdims"), None)
        if keep is not None and not isinstance(keep, ast.Constant):
            return None
        keepdims = bool(keep.value) if isinstance(keep, ast.Constant) else False
        return tuple((1 if keepdims else None) if k in norm else d for k, d in enumerate(x.shape)
                     if keepdims or k not in norm)

    def _matmul_shape(self, e: ast.Call, row: nki_api.ApiRow, bound: dict[str, Value]) -> tuple[int | None, ...] | None:
        if row.ns == "nl":
            x, y = bound.get("x"), bound.get("y")
            tx = next((k.value for k in e.keywords if k.arg == "transpose_x"), None)
            if tx is not None and not isinstance(tx, ast.Constant):
                return None
            m_axis = 1 if isinstance(tx, ast.Constant) and tx.value else 0
        else:
            x, y, m_axis = bound.get("stationary"), bound.get("moving"), 1
        if not (isinstance(x, TileV) and isinstance(y, TileV) and x.shape is not None and y.shape is not None
                and len(x.shape) == 2 and len(y.shape) == 2):
            return None
        return (x.shape[m_axis], y.shape[1])

    def allocation(self, e: ast.Call, name: str, args: list[Value], kwargs: dict[str, Value]) -> Value:
        like = name.endswith("_like")
        shape_v = args[0] if args else kwargs.get("shape", UNKNOWN)
        shape: tuple[int | None, ...] | None = None
        if like and isinstance(shape_v, TileV):
            shape = shape_v.shape
        elif isinstance(shape_v, TupleV):
            shape = tuple(known_int(x) for x in shape_v.items)  # par_dim dims: reported by the par_dim rule
        elif isinstance(shape_v, ShapeV):
            shape = shape_v.dims
        tile_shape = self._shape_of(shape_v) if isinstance(shape_v, TupleV) else shape
        tile_par = next((k for k, x in enumerate(shape_v.items) if isinstance(x, ParDimV)), 0) \
            if isinstance(shape_v, TupleV) else 0
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
