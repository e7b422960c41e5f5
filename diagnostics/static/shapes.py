"""Shape inference of the static interpreter (``interp.py``): what shape (and dtype, buffer) an NKI value gets.

``call_result`` is the tile an NKI API call returns, by the NKI API table's ``result`` kind
(``toolchain/facts/nki_api.py``): elementwise ops broadcast their tiles, loads and ``*_like`` results copy a source,
transposes reverse it, reductions drop (or keep) their axes, matmuls are ``(M, N)``, ``broadcast_to`` / memset
take their ``shape`` argument, iota its index's. ``allocation_shape`` is an allocation's (an
``nl.par_dim`` in it moves the partition axis). ``tile_subscript`` is a tile's view (slices, an int index that
drops its axis, advanced indexing whose index arrays broadcast, the partition axis an ``nl.par_dim`` moved),
``index_subscript`` an index array's (``nl.arange(n)[:, None]``), ``arange_index`` ``nl.arange``'s, and
``slice_extent`` a slice's ``hi - lo``, probing the unknown ints in it. ``shape_of`` reads a shape tuple.

These are pure functions of abstract values (``values.py``): the interpreter evaluates the operands — and so
reports their events — and passes them in; nothing here emits an event or reads the environment.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from nki_agent.toolchain.facts import nki_api
from .values import UNKNOWN, BufferV, DtypeV, IndexV, IntV, ParDimV, ShapeV, TileV, TupleV, Value, broadcast, known_int

_PROBES = (0, 1, 2, 5, 11)  # values tried for unknown ints when measuring a slice's extent (hi - lo)


def call_result(e: ast.Call, row: nki_api.ApiRow, generation: str, args: list[Value],
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
        shape = _reduced(e, first, bound)
        dtype = dtype or (first.dtype if first is not None else None)
    elif kind == "matmul":
        shape, dtype = _matmul_shape(e, row, bound), "float32"
    elif kind == "broadcast":
        shape = shape_of(bound.get("shape", UNKNOWN))
        dtype = dtype or (first.dtype if first is not None else None)
    elif kind == "memset":
        shape = shape_of(bound.get("shape", UNKNOWN))
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

def shape_of(v: Value) -> tuple[int | None, ...] | None:
    if isinstance(v, TupleV):
        return tuple(x.value if isinstance(x, (IntV, ParDimV)) else None for x in v.items)
    if isinstance(v, ShapeV):
        return v.dims
    return None

def _reduced(e: ast.Call, x: TileV | None, bound: dict[str, Value]) -> tuple[int | None, ...] | None:
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

def _matmul_shape(e: ast.Call, row: nki_api.ApiRow, bound: dict[str, Value]) -> tuple[int | None, ...] | None:
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


def allocation_shape(shape_v: Value, like: bool) -> tuple[tuple[int | None, ...] | None, tuple[int | None, ...] | None, int]:
    """An allocation's shape argument (a ``*_like``'s tile): the shape the rules see (an ``nl.par_dim(n)`` dim is
    unknown there: the par_dim rule reports it), the allocated tile's shape, and its partition axis."""
    shape: tuple[int | None, ...] | None = None
    if like and isinstance(shape_v, TileV):
        shape = shape_v.shape
    elif isinstance(shape_v, TupleV):
        shape = tuple(known_int(x) for x in shape_v.items)  # par_dim dims: reported by the par_dim rule
    elif isinstance(shape_v, ShapeV):
        shape = shape_v.dims
    tile_shape = shape_of(shape_v) if isinstance(shape_v, TupleV) else shape
    tile_par = next((k for k, x in enumerate(shape_v.items) if isinstance(x, ParDimV)), 0) \
        if isinstance(shape_v, TupleV) else 0
    return shape, tile_shape, tile_par


def arange_index(e: ast.Call, args: list[Value]) -> IndexV:
    """``nl.arange(n)`` / ``nl.arange(lo, hi)``: a 1-D index of ``n`` (``hi - lo``) entries, when known."""
    n = [known_int(a) for a in args]
    extent: int | None = None
    if len(n) == 1:
        extent = n[0]
    elif len(n) == 2 and n[0] is not None and n[1] is not None:
        extent = n[1] - n[0]
    return IndexV(1, e, (extent if extent is None or extent >= 0 else None,))


def index_subscript(base: IndexV, e: ast.Subscript, keys: list[ast.expr]) -> IndexV:
    """An index array subscripted: ``nl.arange(n)[:, None]`` adds axes (each entry that is None or a slice)."""
    n_axes = sum(1 for k in keys if isinstance(k, (ast.Slice,)) or (isinstance(k, ast.Constant) and k.value is None))
    shape: tuple[int | None, ...] | None = None
    if base.shape is not None and len(base.shape) == 1 and n_axes:
        shape = tuple(base.shape[0] if isinstance(k, ast.Slice) else 1 for k in keys)
    return IndexV(n_axes if n_axes else None, e, shape, base.grid)


def tile_subscript(base: TileV, kinds: list[str], dims: list[int | None],
                   index_shapes: list[tuple[int | None, ...] | None]) -> TileV:
    """The view ``base[keys]``, from each key's kind ("slice", "int", "index", "ellipsis", "other"), the extent
    of each slice (``dims``, None for the other kinds) and the shapes of its index arrays (``()`` for an int)."""
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


def slice_extent(key: ast.Slice, step: int | None, lo: int | None, hi: int | None, base: Value, axis: int,
                 leaf: Callable[[ast.expr], IntV | None]) -> int | None:
    """``hi - lo`` of a step-1 slice when it is the same number for every value of the unknown ints in it
    (``x[i * 128:(i + 1) * 128]`` is 128 rows); an open end is the base's dim. ``step`` / ``lo`` / ``hi``: the
    bounds' known values (the interpreter evaluated them); ``leaf``: the integer a name or attribute is
    (``IntV(None)`` an unknown int, probed; None not an integer)."""
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
        upper = _probe(key.upper, probe, leaf)
        lower = _probe(key.lower, probe, leaf) if key.lower is not None else 0
        if upper is None or lower is None:
            return None
        extents.add(upper - lower)
    extent = extents.pop() if len(extents) == 1 else None
    return extent if extent is not None and extent >= 0 else None


def _probe(e: ast.expr, probe: int, leaf: Callable[[ast.expr], IntV | None], depth: int = 0) -> int | None:
    """``e`` with every unknown int set to ``probe`` (None: not an integer expression)."""
    if depth > 32:
        return None
    if isinstance(e, ast.Constant):
        return e.value if type(e.value) is int else None
    if isinstance(e, ast.Name):
        v = leaf(e)
        return (v.value if v.value is not None else probe) if v is not None else None
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        x = _probe(e.operand, probe, leaf, depth + 1)
        return -x if x is not None else None
    if isinstance(e, ast.BinOp):
        x, y = _probe(e.left, probe, leaf, depth + 1), _probe(e.right, probe, leaf, depth + 1)
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
        v = leaf(e)
        return v.value if v is not None else None
    return None


__all__ = ["allocation_shape", "arange_index", "call_result", "index_subscript", "shape_of", "slice_extent", "tile_subscript"]
