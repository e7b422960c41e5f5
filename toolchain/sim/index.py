"""Classic-API index expressions: ``nl.arange``, ``nl.mgrid``, affine combinations and masks.

An ``Index`` is an integer array with NKI's restrictions attached: it is read-only
(``err_cannot_assign_to_index``), it cannot drive Python control flow
(``err_control_flow_condition_depending_on_arange``), and comparisons build a ``Mask`` that ops take
as ``mask=``. ``ds`` (both generations) is a plain slice.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nki_agent.toolchain.facts.errors import NkiError
from ..location import ast_context, caller_location


def _truth_error() -> NkiError:
    """``bool()`` of an index expression: ``and``/``or``/``not`` combining mask conditions gets its own
    diagnosis (use ``&``/``|``/``~``); anything else is control flow on ``nl.arange``."""
    import ast

    loc = caller_location()
    for node in (ast_context(loc) if loc else [])[:4]:
        if isinstance(node, ast.BoolOp) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
            word = "not" if isinstance(node, ast.UnaryOp) else ("and" if isinstance(node.op, ast.And) else "or")
            symbol = {"and": "&", "or": "|", "not": "~"}[word]
            return NkiError("err_control_flow_condition_depending_on_arange",
                            f"`{word}` on nl.arange conditions (e.g. inside mask=): use `{symbol}` — Python's "
                            f"`{word}` needs a single truth value; combine element-wise, e.g. (i < n) {symbol} (j < m)"
                            if word != "not" else "`not` on nl.arange conditions (e.g. inside mask=): use `~`",
                            loc)
    return NkiError("err_control_flow_condition_depending_on_arange",
                    "Control-flow depending on `nl.arange` or `nl.mgrid` is not supported; use mask= instead", loc)


def _val(x: Any) -> Any:
    if isinstance(x, Index):
        return x.values
    return x


def _tile(x: Any) -> bool:
    """A simulator tile (it opts out of NumPy ufuncs): it computes ``index op tile`` itself, as an NKI op."""
    return getattr(type(x), "__array_ufunc__", 0) is None


class Mask:
    """A compile-time predicate over index expressions (combined only with ``&`` and ``|``)."""

    __slots__ = ("values",)

    def __init__(self, values: np.ndarray) -> None:
        self.values = values

    def __and__(self, other: Any) -> "Mask":
        if _tile(other):
            return NotImplemented
        o = other.values if isinstance(other, Mask) else np.asarray(other, dtype=bool)
        return Mask(np.logical_and(self.values, o))

    __rand__ = __and__

    def __or__(self, other: Any) -> "Mask":
        if _tile(other):
            return NotImplemented
        o = other.values if isinstance(other, Mask) else np.asarray(other, dtype=bool)
        return Mask(np.logical_or(self.values, o))

    __ror__ = __or__

    def __invert__(self) -> "Mask":
        return Mask(np.logical_not(self.values))

    def __bool__(self) -> bool:
        raise _truth_error()


class Index:
    """An affine index array (result of ``nl.arange``/``nl.mgrid`` and arithmetic on them)."""

    __slots__ = ("values",)
    __array_priority__ = 1000  # make numpy defer to our operators

    def __init__(self, values: np.ndarray) -> None:
        self.values = values

    # shape helpers ------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)

    @property
    def ndim(self) -> int:
        return int(self.values.ndim)

    def __len__(self) -> int:
        return int(self.values.shape[0]) if self.values.ndim else 1

    def __getitem__(self, key: Any) -> "Index":
        return Index(self.values[key])

    def __setitem__(self, key: Any, value: Any) -> None:
        raise NkiError("err_cannot_assign_to_index", "'index' tensor does not support item assignment",
                       caller_location())

    def __iter__(self) -> Any:
        raise NkiError("err_control_flow_condition_depending_on_arange",
                       "iterating over `nl.arange` values is not supported; use nl.affine_range",
                       caller_location())

    def __bool__(self) -> bool:
        raise _truth_error()

    def __index__(self) -> int:
        raise NkiError("err_control_flow_condition_depending_on_arange",
                       "an `nl.arange` value cannot be used as a Python integer", caller_location())

    # arithmetic (affine and the integer ops kernels use) ----------------------------------------
    def _bin(self, other: Any, fn: Any) -> "Index":
        if _tile(other):
            return NotImplemented  # type: ignore[no-any-return]
        return Index(fn(self.values, _val(other)))

    def _rbin(self, other: Any, fn: Any) -> "Index":
        if _tile(other):
            return NotImplemented  # type: ignore[no-any-return]
        return Index(fn(_val(other), self.values))

    def __add__(self, o: Any) -> "Index": return self._bin(o, np.add)
    def __radd__(self, o: Any) -> "Index": return self._rbin(o, np.add)
    def __sub__(self, o: Any) -> "Index": return self._bin(o, np.subtract)
    def __rsub__(self, o: Any) -> "Index": return self._rbin(o, np.subtract)
    def __mul__(self, o: Any) -> "Index": return self._bin(o, np.multiply)
    def __rmul__(self, o: Any) -> "Index": return self._rbin(o, np.multiply)
    def __floordiv__(self, o: Any) -> "Index": return self._bin(o, np.floor_divide)
    def __rfloordiv__(self, o: Any) -> "Index": return self._rbin(o, np.floor_divide)
    def __mod__(self, o: Any) -> "Index": return self._bin(o, np.mod)
    def __neg__(self) -> "Index": return Index(-self.values)

    # comparisons build masks ---------------------------------------------------------------------
    def _cmp(self, other: Any, fn: Any) -> Mask:
        if _tile(other):
            return NotImplemented  # type: ignore[no-any-return]
        return Mask(fn(self.values, _val(other)))

    def __lt__(self, o: Any) -> Mask: return self._cmp(o, np.less)
    def __le__(self, o: Any) -> Mask: return self._cmp(o, np.less_equal)
    def __gt__(self, o: Any) -> Mask: return self._cmp(o, np.greater)
    def __ge__(self, o: Any) -> Mask: return self._cmp(o, np.greater_equal)
    def __eq__(self, o: Any) -> Mask: return self._cmp(o, np.equal)  # type: ignore[override]
    def __ne__(self, o: Any) -> Mask: return self._cmp(o, np.not_equal)  # type: ignore[override]
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Index(shape={self.shape})"


def arange(*args: Any) -> Index:
    """``nl.arange(stop)`` / ``nl.arange(start, stop)``: a 1-D index; give it 2-D shape before use."""
    return Index(np.arange(*[int(a) for a in args], dtype=np.int64))


class _MGridResult(tuple):  # type: ignore[type-arg]
    """Tuple of dense grids that also exposes ``.p``, ``.x``, ``.y``, ``.z`` like the classic API."""

    @property
    def p(self) -> Index: return self[0]  # type: ignore[no-any-return]
    @property
    def x(self) -> Index: return self[1]  # type: ignore[no-any-return]
    @property
    def y(self) -> Index: return self[2]  # type: ignore[no-any-return]
    @property
    def z(self) -> Index: return self[3]  # type: ignore[no-any-return]


class _MGrid:
    def __getitem__(self, key: Any) -> _MGridResult:
        keys = key if isinstance(key, tuple) else (key,)
        grids = np.mgrid[tuple(slice(k.start, k.stop, k.step) for k in keys)]
        return _MGridResult(Index(g) for g in grids)


mgrid = _MGrid()


def ds(start: Any, size: Any) -> slice:
    """``nl.ds(start, size)`` is the slice ``start:start+size``."""
    return slice(start, start + size)


def index_values(x: Any) -> np.ndarray | None:
    """Integer array of an Index (None for anything else)."""
    return x.values if isinstance(x, Index) else None
