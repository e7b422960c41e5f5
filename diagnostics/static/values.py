"""Abstract values of the static checker: what is known for sure about a name at a program point.

Everything is "known or unknown": an int is a number or ``None``; a tile has a shape whose dims are
numbers or ``None``, a buffer (``hbm``/``sbuf``/``psum``) or ``None``. Rules report only on known facts,
which is what keeps valid kernels free of squiggles.

Values are never mutated once built. They are slotted, hashable dataclasses rather than frozen ones:
a frozen dataclass pays an ``object.__setattr__`` call per field, and a cold check builds thousands.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Union


@dataclass(slots=True, unsafe_hash=True)
class IntV:
    value: int | None = None


@dataclass(slots=True, unsafe_hash=True)
class ShapeV:
    """The ``.shape`` tuple of a tile (dims may be unknown)."""

    dims: tuple[int | None, ...] | None


@dataclass(slots=True, unsafe_hash=True)
class TileV:
    """A tensor: kernel parameter (HBM), an allocation, an op result, or a view of one of these."""

    shape: tuple[int | None, ...] | None = None
    dtype: str | None = None
    buffer: str | None = None
    origin: ast.AST | None = field(default=None, compare=False)
    name: str = ""
    is_param: bool = False
    certain: bool = True  # False for kernel parameters not declared as tensors (they may be scalars/None/config)
    par_axis: int = 0  # the partition axis (an ``nl.par_dim`` in the allocation's shape moves it)


@dataclass(slots=True, unsafe_hash=True)
class IndexV:
    """An ``nl.arange``/``nl.mgrid`` index expression; ``ndim`` of its array and, when known, its shape
    (``nl.arange(128)[:, None]`` is ``(128, 1)``; an index into a tile broadcasts with the other indices)."""

    ndim: int | None
    origin: ast.AST | None = field(default=None, compare=False)
    shape: tuple[int | None, ...] | None = None
    grid: bool = False  # from ``nl.mgrid`` (its truth tests are left to the simulator: rules see only aranges)


def is_arange_index(v: object) -> bool:
    """An index expression the rules reason about (``nl.arange``-derived; ``nl.mgrid`` ones only give shapes)."""
    return isinstance(v, IndexV) and not v.grid


@dataclass(slots=True, unsafe_hash=True)
class ParDimV:
    """``nl.par_dim(n)``: a dimension of a shape tuple that is the partition axis (``n`` partitions)."""

    value: int | None


@dataclass(slots=True, unsafe_hash=True)
class DsV:
    """``nl.ds(start, size)``: a slice of ``size`` elements (a name may hold one)."""

    size: int | None


@dataclass(slots=True, unsafe_hash=True)
class BufferV:
    kind: str  # hbm | sbuf | psum
    shared: bool = False


@dataclass(slots=True, unsafe_hash=True)
class DtypeV:
    name: str


@dataclass(slots=True, unsafe_hash=True)
class TupleV:
    items: tuple["Value", ...]


@dataclass(slots=True, unsafe_hash=True)
class UnknownV:
    pass


UNKNOWN = UnknownV()
Value = Union[IntV, ShapeV, TileV, IndexV, ParDimV, DsV, BufferV, DtypeV, TupleV, UnknownV]


def known_int(v: Value) -> int | None:
    return v.value if isinstance(v, IntV) else None


def broadcast(shapes: list[tuple[int | None, ...] | None]) -> tuple[int | None, ...] | None:
    """NumPy broadcasting of known-or-unknown shapes (None: the rank is unknown). An unknown dim against a
    known one other than 1 is that one (a valid program can only have it equal, or 1)."""
    if not shapes or any(s is None for s in shapes):
        return None
    rank = max(len(s) for s in shapes if s is not None)
    out: list[int | None] = []
    for k in range(rank):
        dims = [s[len(s) - rank + k] for s in shapes if s is not None and len(s) - rank + k >= 0]
        known = {d for d in dims if d is not None and d != 1}
        if len(known) == 1:
            out.append(known.pop())
        elif not known:
            out.append(1 if dims and all(d == 1 for d in dims) else None)
        else:
            return None  # incompatible: leave it to the simulator
    return tuple(out)


def join(a: Value, b: Value) -> Value:
    """Value after control flow merges: equal facts survive, anything else becomes unknown."""
    if a == b:
        return a
    if isinstance(a, TileV) and isinstance(b, TileV):
        shape = None
        if a.shape is not None and b.shape is not None and len(a.shape) == len(b.shape):
            shape = tuple(x if x == y else None for x, y in zip(a.shape, b.shape))
        return TileV(shape, a.dtype if a.dtype == b.dtype else None, a.buffer if a.buffer == b.buffer else None,
                     a.origin, a.name if a.name == b.name else "", a.is_param and b.is_param, a.certain and b.certain,
                     a.par_axis if a.par_axis == b.par_axis else 0)
    if isinstance(a, IntV) and isinstance(b, IntV):
        return IntV(None)
    return UNKNOWN
