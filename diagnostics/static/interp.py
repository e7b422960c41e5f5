"""Abstract interpretation of one kernel function: walks statements in order, tracks what is known
about each name, and reports NKI events (allocations, calls, subscripts, truth tests) to the rules.

Loops are walked once with an unknown induction variable; branches are walked separately and joined.
Nothing here decides what is an error: rules do, from the events.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Callable

from .values import (UNKNOWN, BufferV, DtypeV, IndexV, IntV, ShapeV, TileV, TupleV, Value, join, known_int)

# nl.tile_size constants (NKI tiling overview); the same on every target.
TILE_SIZE = {"pmax": 128, "psum_fmax": 512, "psum_bank_fmax": 512, "gemm_stationary_fmax": 128,
             "gemm_moving_fmax": 512, "bn_stats_fmax": 512}
DTYPE_BYTES = {"float32": 4, "tfloat32": 4, "int32": 4, "uint32": 4, "float16": 2, "bfloat16": 2, "int16": 2,
               "uint16": 2, "int8": 1, "uint8": 1, "bool_": 1, "float8_e4m3": 1, "float8_e5m2": 1,
               "float8_e4m3fn": 1, "fp32": 4, "bf16": 2, "fp16": 2}
# APIs whose result is certainly a tile (everything else, e.g. program_id or get_nc_version, is not)
NL_TILE_RESULTS = {"load", "copy", "matmul", "transpose", "broadcast_to", "where", "softmax", "rms_norm", "load_transpose2d",
                   "exp", "log", "sqrt", "rsqrt", "reciprocal", "square", "abs", "negative", "sign", "trunc", "floor",
                   "ceil", "sin", "cos", "tan", "tanh", "arctan", "sigmoid", "relu", "gelu", "gelu_dx", "gelu_apprx_tanh",
                   "silu", "silu_dx", "erf", "erf_dx", "softplus", "mish", "add", "subtract", "multiply", "divide",
                   "power", "maximum", "minimum", "equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
                   "logical_and", "logical_or", "logical_xor", "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor",
                   "invert", "left_shift", "right_shift", "sum", "max", "min", "mean", "prod", "var", "all"}
CLASSIC_ISA_TILE_RESULTS = {"nc_matmul", "nc_transpose", "activation", "activation_reduce", "tensor_tensor",
                            "tensor_scalar", "tensor_reduce", "tensor_copy", "iota", "memset", "affine_select",
                            "bn_stats", "bn_aggr", "reciprocal", "scalar_tensor_tensor", "tensor_tensor_scan"}
ALLOCATORS = {"ndarray", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like", "rand"}
LOOPS = {"affine_range", "sequential_range", "static_range", "range", "tile_range", "dynamic_range"}
_API_PREFIXES = (("neuronxcc.nki.language.", "nl"), ("nki.language.", "nl"), ("neuronxcc.nki.isa.", "nisa"),
                 ("nki.isa.", "nisa"), ("neuronxcc.nki.typing.", "nt"), ("nki.typing.", "nt"),
                 ("neuronxcc.nki.", "nki"), ("nki.", "nki"))
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
            found = None
            for prefix, ns in _API_PREFIXES:
                if qual.startswith(prefix):
                    found = (ns, qual[len(prefix):])
                    break
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
        if isinstance(value, IndexV) or (isinstance(value, TileV) and value.certain):
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
        if isinstance(e.op, ast.Not) and (isinstance(v, IndexV) or (isinstance(v, TileV) and v.certain)):
            self.emit(Event("truth", e, {"value": v, "where": "not"}))
        if isinstance(e.op, ast.USub) and known_int(v) is not None:
            return IntV(-known_int(v))  # type: ignore[operator]
        return IntV(None) if isinstance(v, IntV) else UNKNOWN

    def boolop(self, e: ast.BoolOp) -> Value:
        for operand in e.values:
            v = self.expr(operand)
            if isinstance(v, IndexV) or (isinstance(v, TileV) and v.certain):
                self.emit(Event("truth", e, {"value": v, "where": "and" if isinstance(e.op, ast.And) else "or",
                                              "operand": operand}))
        return UNKNOWN

    def compare(self, e: ast.Compare) -> Value:
        vals = [self.expr(e.left)] + [self.expr(c) for c in e.comparators]
        if any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in e.ops) or any(
                isinstance(c, ast.Constant) and c.value is None for c in [e.left] + e.comparators):
            return UNKNOWN  # identity / None / membership tests are compile-time Python
        if any(isinstance(v, IndexV) for v in vals):
            return IndexV(None, e)  # a mask
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
            return IndexV(max((n for n in nd if n is not None), default=None) if None not in nd else None, e)
        if (isinstance(a, TileV) and a.certain) or (isinstance(b, TileV) and b.certain):
            t = a if isinstance(a, TileV) else b
            assert isinstance(t, TileV)
            return TileV(t.shape if not (isinstance(a, TileV) and isinstance(b, TileV)) else None, None, "sbuf", e)
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
            return IndexV(n_axes if n_axes else None, e)
        kinds = []
        dims: list[int | None] = []
        for key in keys:
            if isinstance(key, ast.Slice):
                kinds.append("slice")
                lo, hi, st = (known_int(self.expr(x)) if x is not None else None for x in (key.lower, key.upper, key.step))
                if key.step is not None and st != 1:
                    dims.append(None)
                elif key.upper is not None and hi is not None and (key.lower is None or lo is not None):
                    dims.append(hi - (lo or 0) if hi >= (lo or 0) and hi >= 0 and (lo or 0) >= 0 else None)
                else:
                    dims.append(None if key.upper is not None or not isinstance(base, TileV) or base.shape is None
                                else (base.shape[len(dims)] if len(dims) < len(base.shape) else None))
            else:
                v = self.expr(key)
                if isinstance(v, IndexV):
                    kinds.append("index")
                    dims.append(None)
                elif isinstance(key, ast.Constant) and key.value is Ellipsis:
                    kinds.append("ellipsis")
                    dims.append(None)
                else:
                    kinds.append("int" if isinstance(v, IntV) else "other")
                    dims.append(None)
        if isinstance(base, TileV):
            self.emit(Event("subscript", e, {"tile": base, "kinds": kinds,
                                             "index_values": [self.expr(k) if not isinstance(k, ast.Slice) else None
                                                              for k in keys]}))
            shape: tuple[int | None, ...] | None = None
            if kinds and all(kd == "slice" for kd in kinds) and (base.shape is None or len(kinds) == len(base.shape)):
                shape = tuple(dims)  # with an unknown base rank, dim 0 (the partition dim) is still exact
            return TileV(shape, base.dtype, base.buffer, base.origin, base.name, base.is_param, base.certain)
        return UNKNOWN

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
            return IndexV(1, e)
        if ns == "nl" and name == "load":
            src = args[0] if args else kwargs.get("src", UNKNOWN)
            shape = src.shape if isinstance(src, TileV) else None
            dtype = kwargs.get("dtype")
            return TileV(shape, dtype.name if isinstance(dtype, DtypeV) else (src.dtype if isinstance(src, TileV) else None),
                         "sbuf", e)
        if (ns == "nl" and name == "matmul") or (ns == "nisa" and name == "nc_matmul" and self.ctx.generation == "classic"):
            return TileV(None, "float32", "psum", e)
        if (ns == "nl" and name in NL_TILE_RESULTS) or (
                ns == "nisa" and name in CLASSIC_ISA_TILE_RESULTS and self.ctx.generation == "classic"):
            first = next((a for a in args if isinstance(a, TileV)), None)
            same_shape = first is not None and name not in ("transpose", "nc_transpose", "load_transpose2d", "sum",
                                                            "max", "min", "mean", "prod", "var", "all", "tensor_reduce",
                                                            "bn_stats", "bn_aggr", "nc_matmul", "broadcast_to")
            return TileV(first.shape if same_shape and first is not None else None, None, None, e)
        return UNKNOWN

    def allocation(self, e: ast.Call, name: str, args: list[Value], kwargs: dict[str, Value]) -> Value:
        like = name.endswith("_like")
        shape_v = args[0] if args else kwargs.get("shape", UNKNOWN)
        shape: tuple[int | None, ...] | None = None
        if like and isinstance(shape_v, TileV):
            shape = shape_v.shape
        elif isinstance(shape_v, TupleV):
            shape = tuple(known_int(x) for x in shape_v.items)
        elif isinstance(shape_v, ShapeV):
            shape = shape_v.dims
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
        return TileV(shape, dtype, buffer, e, label)

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
