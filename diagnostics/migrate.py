"""Migrating a classic ``neuronxcc.nki`` kernel file to the new ``nki`` API, where the rewrite is mechanical
and exact (the quick fix behind "this SDK rejects ``neuronxcc.nki``").

``migrate_to_new_api(text)`` runs three text-to-text stages and checks what comes out:

1. masks -> slices (``migrate_masks``): the classic ragged-last-tile idiom (``nl.arange`` indices and
   ``mask=(rows < n)``) becomes ``min()``-clamped slices;
2. ISA calls -> ``dst`` form: ``y = nisa.tensor_tensor(x, w, op=nl.add)`` becomes
   ``y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)`` + ``nisa.tensor_tensor(dst=y, data1=x, ...)``.
   The destination's dtype is exactly the classic result dtype: ``dtype=`` when given, else the input's
   dtype, and for two-input instructions only when both inputs provably share their dtype (same source);
3. imports: ``neuronxcc.nki[.language|.isa]`` -> ``nki[.language|.isa]``.

The result is offered only if it uses nothing but APIs that behave the same in both generations
(``PORTABLE_NL``, the element-wise ISA instructions in ``dst`` form, a bare ``@nki.jit``, outputs in
``shared_hbm``); anything else (``nl.arange`` or masks left over, other ISA calls, SPMD grids, jit
options, the module object escaping) gets no fix.
"""

from __future__ import annotations

import ast

from .ast_edit import (
    Refuse,
    absent,
    alias_of,
    api_name,
    bind,
    char_range,
    diff_edits,
    fresh,
    line_bytes,
    names_in,
    offset,
    own_lines,
    qual,
    replace_spans,
    segment,
    taken_names,
)
from .isa_signatures import CLASSIC as ISA_CLASSIC
from .isa_signatures import NEW
from .migrate_masks import masks_to_slices
from .model import Fix
from .static import module_info

# nl APIs that run identically under both generations (tile-level load/store/element-wise, on slices)
PORTABLE_NL = {"load", "store", "ndarray", "zeros", "ones", "full", "affine_range", "sequential_range",
               "static_range", "exp", "log", "sqrt", "rsqrt", "reciprocal", "square", "abs", "negative", "sign",
               "tanh", "sigmoid", "relu", "gelu", "silu", "sin", "cos", "add", "subtract", "multiply", "divide",
               "maximum", "minimum", "power", "copy", "tile_size", "sbuf", "shared_hbm", "float32", "float16",
               "bfloat16", "int32", "int8", "uint8", "int16"}
UNARY_NL = {"exp", "log", "sqrt", "rsqrt", "reciprocal", "square", "abs", "negative", "sign", "tanh", "sigmoid",
            "relu", "gelu", "silu", "sin", "cos", "copy"}
NEW_MODULE = {"neuronxcc.nki": "nki", "neuronxcc.nki.language": "nki.language", "neuronxcc.nki.isa": "nki.isa"}

# what this migration rewrites, and the new parameters that follow ``dst``
ISA_NEW = {k: tuple(p for p in NEW[k] if p not in ("dst", "name")) for k in (
    "tensor_tensor", "activation", "tensor_scalar", "tensor_copy", "reciprocal", "scalar_tensor_tensor", "memset")}
# the classic result dtype (without dtype=) is the dtype of these inputs, which must agree
DTYPE_FROM = {"tensor_tensor": ("data1", "data2"), "activation": ("data",), "tensor_scalar": ("data",),
              "tensor_copy": ("src",), "reciprocal": ("data",), "scalar_tensor_tensor": ("data", "operand1"),
              "memset": ()}
FLOAT_DTYPES = {"float32", "float16", "bfloat16"}
INT_DTYPES = {"int32", "int8", "uint8", "int16"}


def migrate_to_new_api(text: str) -> list[Fix]:
    """The migration of a classic kernel file as one fix (line edits), or nothing when it is not exact."""
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    if module_info(module).generation != "classic":
        return []
    try:
        sliced = masks_to_slices(text)
        dst_form = isa_to_dst_form(sliced)
        new = _imports(dst_form)
        _check_portable(new)
    except (Refuse, SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    if new == text:
        return []
    masks = any(isinstance(n, ast.keyword) and n.arg == "mask" for n in ast.walk(module))
    parts = ["imports"] + (["ISA calls in dst form"] if dst_form != sliced else []) + \
        ([f"index arrays{' and masks' if masks else ''} as slices"] if sliced != text else [])
    title = "Migrate the imports to the new NKI API (nki)" if len(parts) == 1 else \
        f"Migrate the kernel to the new NKI API (nki): {', '.join(parts)}"
    return [Fix(title, diff_edits(text, new))]


# -- stage 2: ISA calls -> dst form ---------------------------------------------------------------------
def isa_to_dst_form(text: str) -> str:
    """Rewrite every ``name = nisa.<element-wise>(...)`` statement of a classic file into an allocation and a
    ``dst=`` call, and every ``nisa.dma_copy`` into keyword form. Other ISA uses are left for the final check."""
    module = ast.parse(text)
    aliases = module_info(module).aliases
    nl, nisa = alias_of(aliases, "language"), alias_of(aliases, "isa")
    lines = text.split("\n")
    taken = taken_names(module)
    edits: list[tuple[int, int, str]] = []
    facts: dict[int, _DtypeFacts] = {}
    for fn, stmt in _statements(module):
        call = stmt.value if isinstance(stmt, (ast.Assign, ast.Expr)) else None
        if isinstance(call, ast.Call) and (name := api_name(call.func, aliases, "isa")) is not None:
            if fn is None or nl is None or nisa is None or not own_lines(lines, stmt):
                raise Refuse
            if id(fn) not in facts:
                facts[id(fn)] = _DtypeFacts(fn, aliases)
            dtypes = facts[id(fn)]
            if isinstance(stmt, ast.Expr) and name == "dma_copy":
                bound = bind(call, ("dst", "src"))
                if set(bound) != {"dst", "src"}:
                    raise Refuse
                new = f"{nisa}.dma_copy(dst={segment(text, lines, bound['dst'])}, " \
                      f"src={segment(text, lines, bound['src'])})"
                edits.append((*char_range(lines, call), new))
            elif isinstance(stmt, ast.Assign) and name in ISA_NEW:
                edits.append(_dst_form(text, lines, stmt, call, name, nl, nisa, dtypes, taken))
    return replace_spans(text, edits)


def _statements(module: ast.Module) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef | None, ast.stmt]]:
    """Every statement with the function it belongs to (the innermost; None at module level)."""
    out: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef | None, ast.stmt]] = []
    todo: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef | None, ast.AST]] = [(None, module)]
    while todo:
        fn, node = todo.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                out.append((fn, child))
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn
            if isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
                todo.append((inner, child))
    return out


def _dst_form(text: str, lines: list[str], stmt: ast.Assign, call: ast.Call, name: str, nl: str, nisa: str,
              dtypes: _DtypeFacts, taken: set[str]) -> tuple[int, int, str]:
    if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
        raise Refuse
    target = stmt.targets[0].id
    bound = bind(call, ISA_CLASSIC[name])
    if not absent(bound.pop("mask", None)):
        raise Refuse
    dtype = bound.pop("dtype", None)
    sources = [bound.get(p) for p in DTYPE_FROM[name]]
    if any(s is None or not _simple(s) for s in sources):
        raise Refuse
    if not absent(dtype):
        dtype_text = segment(text, lines, dtype)  # type: ignore[arg-type]
    elif name != "memset" and dtypes.same(sources):  # type: ignore[arg-type]
        dtype_text = f"{segment(text, lines, sources[0])}.dtype"  # type: ignore[arg-type]
    else:
        raise Refuse
    if name == "memset":
        shape = bound.pop("shape", None)
        value = bound.get("value")
        kind = dtypes.literal(dtype) if dtype is not None else None
        if shape is None or not (isinstance(value, ast.Constant) and type(value.value) in (int, float)) or not (
                kind in FLOAT_DTYPES or (kind in INT_DTYPES and type(value.value) is int)):
            raise Refuse
        shape_text = segment(text, lines, shape)
    else:
        shape_text = f"{segment(text, lines, sources[0])}.shape"  # type: ignore[arg-type]
    if set(bound) - set(ISA_NEW[name]):
        raise Refuse
    reads = set().union(*(names_in(v) for v in bound.values())) if bound else set()
    dst = fresh(f"{target}_out", taken) if target in reads else target
    args = ", ".join(f"{k}={segment(text, lines, bound[k])}" for k in ISA_NEW[name] if k in bound)
    pad = " " * stmt.col_offset
    end_line = stmt.end_lineno or stmt.lineno
    comment = line_bytes(lines, end_line)[stmt.end_col_offset or 0:].decode("utf-8", "ignore").strip()
    out = [f"{dst} = {nl}.ndarray({shape_text}, dtype={dtype_text}, buffer={nl}.sbuf)",
           f"{pad}{nisa}.{name}(dst={dst}, {args})" + (f"  {comment}" if comment else "")]
    if dst != target:
        out.append(f"{pad}{target} = {dst}")
    start = offset(lines, stmt.lineno, stmt.col_offset)
    return start, offset(lines, end_line, len(line_bytes(lines, end_line))), "\n".join(out)


def _simple(e: ast.expr) -> bool:
    """A tile operand whose ``.dtype``/``.shape`` can be read without evaluating anything twice."""
    if isinstance(e, ast.Name):
        return True
    if isinstance(e, ast.Subscript) and isinstance(e.value, ast.Name):
        return not any(isinstance(n, (ast.Call, ast.NamedExpr, ast.Await, ast.Yield)) for n in ast.walk(e.slice))
    return False


class _DtypeFacts:
    """Symbolic dtypes of a function's tiles: a literal (``lit:float32``) or "the dtype of HBM tensor x"
    (``hbm:x``); None when not known for certain. A name assigned several times has a dtype when every one
    of its assignments gives that dtype assuming the name already has it (an inductive invariant, so
    ``e = nisa.tensor_scalar(e, ...)`` keeps ``e``'s dtype)."""

    def __init__(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, aliases: dict[str, str]) -> None:
        self.aliases = aliases
        self.params = {a.arg for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs}
        stores: dict[str, int] = {}
        for n in ast.walk(fn):
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                stores[n.id] = stores.get(n.id, 0) + 1
        self.values: dict[str, list[ast.expr]] = {}
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                self.values.setdefault(n.targets[0].id, []).append(n.value)
        for name, vals in list(self.values.items()):
            if stores.get(name) != len(vals) or name in self.params:
                del self.values[name]  # also bound by unpacking, a loop, `+=`, `del`...: unknown
        self.params -= set(stores)
        self._assumed: dict[str, str | None] = {}
        self._budget = 20_000

    def same(self, exprs: list[ast.expr]) -> bool:
        keys = {self.key(e) for e in exprs}
        return len(keys) == 1 and None not in keys

    def literal(self, e: ast.expr) -> str | None:
        """``float32`` for ``nl.float32`` (a dtype of the language module), else None."""
        leaf = api_name(e, self.aliases, "language")
        return leaf if leaf in FLOAT_DTYPES | INT_DTYPES else None

    def dtype_key(self, e: ast.expr) -> str | None:
        """The key of a dtype expression: ``nl.float32`` or ``x.dtype``."""
        lit = self.literal(e)
        if lit is not None:
            return f"lit:{lit}"
        if isinstance(e, ast.Attribute) and e.attr == "dtype":
            return self.key(e.value)
        return None

    def key(self, e: ast.expr) -> str | None:
        if isinstance(e, ast.Subscript):
            return self.key(e.value)
        self._budget -= 1
        if self._budget < 0:
            return None
        if isinstance(e, ast.Name):
            if e.id in self.params:
                return f"hbm:{e.id}"
            if e.id in self._assumed:
                return self._assumed[e.id]
            values = self.values.get(e.id)
            if not values:
                return None
            self._assumed[e.id] = None
            try:  # a candidate from the assignments that do not need it, then the check of all of them
                candidate = next((k for k in (self.key(v) for v in values) if k is not None), None)
                self._assumed[e.id] = candidate
                return candidate if candidate is not None and all(self.key(v) == candidate for v in values) \
                    else None
            finally:
                del self._assumed[e.id]
        if not isinstance(e, ast.Call) or any(isinstance(a, ast.Starred) for a in e.args):
            return None
        kw = {k.arg: k.value for k in e.keywords if k.arg}
        if "dtype" in kw and not absent(kw["dtype"]):
            return self.dtype_key(kw["dtype"])
        nl_name = api_name(e.func, self.aliases, "language")
        if nl_name == "load" and e.args:
            return self.key(e.args[0])
        if nl_name in ("ndarray", "zeros", "ones") and len(e.args) > 1:
            return self.dtype_key(e.args[1])
        if nl_name in UNARY_NL and len(e.args) == 1 and set(kw) <= {"mask"}:
            return self.key(e.args[0])
        isa = api_name(e.func, self.aliases, "isa")
        if isa in DTYPE_FROM and isa != "memset":
            try:
                bound = bind(e, ISA_CLASSIC[isa])
            except Refuse:
                return None
            if not absent(bound.get("dtype")):
                return self.dtype_key(bound["dtype"])
            sources = [bound.get(p) for p in DTYPE_FROM[isa]]
            if all(s is not None for s in sources) and self.same(sources):  # type: ignore[arg-type]
                return self.key(sources[0])  # type: ignore[arg-type]
        return None


# -- stage 3: imports -----------------------------------------------------------------------------------
def _imports(text: str) -> str:
    module = ast.parse(text)
    lines = text.split("\n")
    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(module):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and _mentions_classic(node):
            if node not in module.body:
                raise Refuse  # conditional / local imports: not mechanical
            edits.append((*char_range(lines, node), _rewrite_import(node)))
    if not edits:
        raise Refuse
    return replace_spans(text, edits)


def _mentions_classic(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.Import):
        return any(a.name == "neuronxcc" or a.name.startswith("neuronxcc.") for a in node.names)
    return bool(node.module) and (node.module == "neuronxcc" or str(node.module).startswith("neuronxcc."))


def _rewrite_import(node: ast.Import | ast.ImportFrom) -> str:
    if len(node.names) != 1:
        raise Refuse
    a = node.names[0]
    if isinstance(node, ast.Import):
        if a.name not in NEW_MODULE or a.asname is None:
            raise Refuse  # `import neuronxcc.nki.language` (no alias) binds `neuronxcc`: not mechanical
        new = NEW_MODULE[a.name]
        return f"import {new}" if a.asname == new else f"import {new} as {a.asname}"
    full = f"{node.module}.{a.name}"
    if node.level or full not in NEW_MODULE:
        raise Refuse
    new = NEW_MODULE[full]
    local = a.asname or a.name
    head, _, leaf = new.rpartition(".")
    if not head:
        return f"import {new}" if local == new else f"import {new} as {local}"
    return f"from {head} import {leaf}" + (f" as {local}" if local != leaf else "")


# -- the check of the result ----------------------------------------------------------------------------
def _check_portable(text: str) -> None:
    """Refuse unless the migrated file uses only APIs that behave the same as their classic originals."""
    module = ast.parse(text)
    info = module_info(module)
    if info.generation != "new":
        raise Refuse
    aliases = info.aliases
    nki_names = {a for a, q in aliases.items() if q == "nki" or q.startswith("nki.")}
    parents = {id(c): p for p in ast.walk(module) for c in ast.iter_child_nodes(p)}
    kernels = 0
    for node in ast.walk(module):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in ("GRID", "LNC")
                                                for t in node.targets):
            raise Refuse  # launch grids differ between the generations
        if isinstance(node, ast.keyword) and node.arg == "mask":
            raise Refuse
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                q = qual(target, aliases) or ""
                if q == "nki" or q.startswith("nki."):
                    if isinstance(d, ast.Call) or q != "nki.jit":
                        raise Refuse  # jit(...) with options, baremetal, benchmark...
                    kernels += 1
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in nki_names:
            _check_attribute(node, qual(node, aliases) or "", parents, aliases)
        elif isinstance(node, ast.Name) and node.id in nki_names and not (
                isinstance(parents.get(id(node)), ast.Attribute) and parents[id(node)].value is node):  # type: ignore[attr-defined]
            raise Refuse  # the module object itself escapes (passed around, aliased)
    if kernels == 0:
        raise Refuse


def _check_attribute(node: ast.Attribute, q: str, parents: dict[int, ast.AST], aliases: dict[str, str]) -> None:
    if q == "nki.jit" or q == "nki.isa.engine":
        return
    if q.startswith("nki.language."):
        leaf = q.split(".")[2]
        if leaf not in PORTABLE_NL:
            raise Refuse
        if leaf in ("ndarray", "zeros", "ones", "full"):
            call = parents.get(id(node))
            buf = next((k.value for k in call.keywords if k.arg == "buffer"), None) \
                if isinstance(call, ast.Call) and call.func is node else None
            if buf is None or qual(buf, aliases) not in ("nki.language.sbuf", "nki.language.shared_hbm"):
                raise Refuse  # allocations name their buffer (the new API has no default HBM)
        return
    call = parents.get(id(node))
    leaf = q[len("nki.isa."):] if q.startswith("nki.isa.") else ""
    if not (isinstance(call, ast.Call) and call.func is node and (leaf in ISA_NEW or leaf == "dma_copy")
            and not call.args and "dst" in {k.arg for k in call.keywords}
            and isinstance(parents.get(id(call)), ast.Expr)):
        raise Refuse
