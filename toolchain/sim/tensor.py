"""Tensors as kernel code sees them: the documented NKI tensor API, and no route to the host data.

A ``Tensor`` is the handle every kernel argument, allocation, load result and view is. It offers what
the NKI docs give tensors (``NkiTensor``: ``shape``, ``strides``, ``offset``, ``name``, ``dtype``,
``buffer``, ``ndim``, ``size`` and the view methods; classic ``nki.tensor``: ``itemsize``,
``reshape``, ``view``, ``astype``, ``broadcast_to``, ``expand_dims``, ``assert_shape``; Python
operators and ``+=`` as NKI ops) and nothing else:

- the simulator's side (``view.View``: the storage, its NumPy array, the checks' bookkeeping) sits
  in one slot whose descriptor is removed from the class (and whose name is random per process), so
  no attribute access, ``vars``/``__dict__``, ``object.__getattribute__``, ``copy``/``pickle`` or
  ``__class__`` swap reaches it; ``sim`` modules use ``view_of`` and the helpers below;
- unknown attributes raise ``TensorAttributeError`` (an ``AttributeError``): ``sim_host_access``
  for simulator internals and NumPy array attributes, ``sim_python_exception`` otherwise;
- NumPy on a tensor is refused with ``sim_host_access``: ``__array__`` and ``__array_function__``
  raise, ``__array_ufunc__ = None`` (so ``ndarray + tile`` still defers to the NKI operator, and an
  explicit ``np.add(tile, 1)`` raises a ``TypeError`` that ``kernel.launch`` reports as host access);
- runtime values never become Python values: ``bool``/``int``/``float``/``complex``/``iter``/``in``
  raise the documented control-flow errors, and ``repr`` shows name, shape, dtype and buffer only.
"""

from __future__ import annotations

import ast
import secrets
from typing import Any, Callable

import numpy as np

from nki_agent.toolchain.facts import dtypes
from nki_agent.toolchain.facts.errors import NkiError, SourceLocation
from ..location import ast_context, caller_location
from .buffers import Buffer
from . import runtime
from .instrument import traced_region
from .predicate import predicate_of
from .storage import ParDim, Storage, new_storage, par_dim
from .view import View, mask_values as _view_mask_values

# Ops modules register the element-wise implementations used by Python operators on tensors.
OPERATORS: dict[str, Callable[..., Any]] = {}

HOST_ACCESS = "sim_host_access"
_GUIDE = "NKI kernels compute with nl.* / nisa.* only: tile values live on the device, not in the Python program"
_PUBLIC = ("shape", "dtype", "buffer", "ndim", "size", "itemsize", "name", "strides", "offset", "reshape", "view",
           "reinterpret_cast", "ap", "permute", "broadcast", "expand_dim", "squeeze_dim", "reshape_dim",
           "flatten_dims", "slice", "select", "is_contiguous", "get_pattern", "is_indirect", "astype",
           "broadcast_to", "expand_dims", "assert_shape", "vector_select", "rearrange", "indirect")
# names that are simulator internals or NumPy array API: reaching for them is reaching for host data
_INTERNAL = frozenset(dir(np.ndarray)) | frozenset(View.__slots__) | frozenset(Storage.__slots__) | frozenset(
    n for n in dir(View) if not n.startswith("__")) | {"storage", "array", "values", "numpy", "data", "tensor",
                                                       "cpu", "detach", "to_numpy", "handle"}


class TensorAttributeError(NkiError, AttributeError):
    """An attribute NKI tensors do not have (an ``AttributeError``, so ``hasattr`` stays truthful)."""


def host_access_error(route: str, location: SourceLocation | None = None) -> NkiError:
    """The ``sim_host_access`` error for kernel code that used NumPy (``route``) on an NKI tensor."""
    return NkiError(HOST_ACCESS, f"kernel code used NumPy on an NKI tensor ({route}); {_GUIDE}",
                    location or caller_location())


def called_function(loc: SourceLocation | None, default: str) -> str:
    """The source text of the function a call at ``loc`` calls (``np.asarray``), else ``default``."""
    for node in ast_context(loc)[:3] if loc is not None else ():
        if isinstance(node, ast.Call):
            return ast.unparse(node.func)
    return default


def _control_flow(t: "Tensor", what: str) -> NkiError:
    return NkiError("err_dynamic_control_flow_not_supported",
                    f"tensor `{t.name}` holds runtime values and cannot be used as {what}", caller_location())


# The slot's name is random per process and is removed from the class below: only ``view_of`` reads it.
_SLOT = "_h" + secrets.token_hex(8)


class Tensor:
    """An NKI tensor (``nl.ndarray`` results, kernel arguments, views): shape, dtype, buffer and views."""

    __slots__ = (_SLOT, "__weakref__")  # weak references: a traced kernel's dropped handles (``record.py``)

    def __new__(cls, *args: Any, **kwargs: Any) -> "Tensor":
        raise NkiError("sim_unsupported_api", "constructing a tensor from a storage handle is not modelled by the "
                       "embedded simulator; allocate with nl.ndarray / nl.zeros", caller_location())

    # -- attributes (NkiTensor / classic nki.tensor) ---------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return _get(self).shape

    @property
    def dtype(self) -> np.dtype[Any]:
        return _get(self).dtype

    @property
    def buffer(self) -> Buffer:
        return _get(self).buffer

    @property
    def ndim(self) -> int:
        return _get(self).ndim

    @property
    def size(self) -> int:
        return _get(self).size

    @property
    def itemsize(self) -> int:
        return _get(self).itemsize

    @property
    def name(self) -> str:
        return _get(self).name

    @property
    def strides(self) -> tuple[int, ...]:
        """Element strides of the view over its storage (row-major, the partition dim included)."""
        return _layout(_get(self))[0]

    @property
    def offset(self) -> int:
        """Element offset of the view's first element in its storage."""
        return _layout(_get(self))[1]

    # -- view methods ----------------------------------------------------------------------------------
    def reshape(self, *shape: Any, **kw: Any) -> "Tensor":
        return wrap(_get(self).reshape(*shape, **kw))

    def view(self, dtype: Any) -> "Tensor":
        return wrap(_get(self).view(dtype))

    reinterpret_cast = view

    def ap(self, pattern: Any, offset: Any = 0, scalar_offset: Any = None, vector_offset: Any = None,
           indirect_dim: int = 0, dtype: Any = None) -> "Tensor":
        return wrap(_get(self).ap(pattern, offset, scalar_offset, vector_offset, indirect_dim, dtype))

    def permute(self, dims: Any) -> "Tensor":
        return wrap(_get(self).permute(dims))

    def broadcast(self, dim: int, size: int) -> "Tensor":
        return wrap(_get(self).broadcast(dim, size))

    def expand_dim(self, dim: int) -> "Tensor":
        return wrap(_get(self).expand_dim(dim))

    def expand_dims(self, axis: int) -> "Tensor":
        return wrap(_get(self).expand_dim(axis))

    def squeeze_dim(self, dim: int) -> "Tensor":
        return wrap(_get(self).squeeze_dim(dim))

    def reshape_dim(self, dim: int, shape: Any) -> "Tensor":
        return wrap(_get(self).reshape_dim(dim, shape))

    def flatten_dims(self, start_dim: int, end_dim: int) -> "Tensor":
        return wrap(_get(self).flatten_dims(start_dim, end_dim))

    def slice(self, dim: int, start: int, end: int, step: int = 1) -> "Tensor":
        return wrap(_get(self).slice(dim, start, end, step))

    def select(self, dim: int, index: Any) -> "Tensor":
        return wrap(_get(self).select(dim, _get(index) if isinstance(index, Tensor) else index))

    def is_contiguous(self) -> bool:
        return _get(self).is_contiguous()

    def get_pattern(self) -> list[list[int]]:
        strides, _ = _layout(_get(self))
        return [[s, n] for s, n in zip(strides, self.shape)]

    def is_indirect(self) -> bool:
        return False

    def vector_select(self, *args: Any, **kwargs: Any) -> "Tensor":
        raise _unmodelled("vector_select")

    def rearrange(self, *args: Any, **kwargs: Any) -> "Tensor":
        raise _unmodelled("rearrange")

    def indirect(self, *args: Any, **kwargs: Any) -> "Tensor":
        raise _unmodelled("indirect")

    def astype(self, dtype: Any) -> "Tensor":
        """Classic ``tile.astype(dtype)``: a copy in the new dtype."""
        from .ops.memory import copy

        return copy(self, dtype=dtype)

    def broadcast_to(self, shape: Any) -> "Tensor":
        """Classic ``tile.broadcast_to(shape)``: a new tile (same as ``nl.broadcast_to``)."""
        from .ops.memory import broadcast_to

        return broadcast_to(self, shape)

    def assert_shape(self, shape: Any) -> "Tensor":
        if tuple(int(s) for s in shape) != self.shape:
            raise NkiError("sim_shape_mismatch", f"tensor `{self.name}` has shape {list(self.shape)}, expected "
                           f"{list(shape)}", caller_location())
        return self

    # -- indexing --------------------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> "Tensor":
        return wrap(_get(self)[_unwrap_key(key)])

    def __setitem__(self, key: Any, value: Any) -> None:
        _traced("assign", _assign, self, key, value)

    def __len__(self) -> int:
        return self.shape[0]

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"Tensor({self.name}, shape={self.shape}, dtype={dtypes.name(self.dtype)}, buffer={self.buffer!r})"

    def __dir__(self) -> list[str]:
        return sorted(_PUBLIC)

    # -- everything else is not NKI ----------------------------------------------------------------
    def __getattr__(self, attr: str) -> Any:
        dunder = attr.startswith("__") and attr.endswith("__")
        loc = None if dunder else caller_location()  # probes of special names (NumPy, copy) stay cheap
        if attr in _INTERNAL or attr.startswith("_"):
            raise TensorAttributeError(
                HOST_ACCESS, f"NKI tensors have no attribute '{attr}': simulator internals are not part of NKI "
                f"(a tensor offers {', '.join(_PUBLIC[:9])} and view methods); {_GUIDE}", loc)
        raise TensorAttributeError(
            "sim_python_exception", f"AttributeError: NKI tensors have no attribute '{attr}' (simulator internals "
            f"are not part of NKI; a tensor offers {', '.join(_PUBLIC[:9])} and view methods)", loc)

    @property
    def __dict__(self) -> Any:  # type: ignore[override]  # ``vars(t)`` / ``t.__dict__``: a clear refusal
        raise NkiError(HOST_ACCESS, f"NKI tensors have no __dict__: simulator internals are not part of NKI; {_GUIDE}",
                       caller_location())

    def __setattr__(self, attr: str, value: Any) -> None:
        raise TensorAttributeError(HOST_ACCESS, f"cannot set '{attr}' on an NKI tensor: its attributes and the "
                                   "simulator internals behind it are not part of NKI to modify; write elements with "
                                   "t[...] = ... or nl.store", caller_location())

    def __delattr__(self, attr: str) -> None:
        self.__setattr__(attr, None)

    __array_ufunc__ = None  # ``ndarray + tile`` defers to Tensor.__radd__; ``np.add(tile, 1)`` is a TypeError

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        loc = caller_location()
        raise host_access_error(called_function(loc, "np.asarray"), loc)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        mod = str(getattr(func, "__module__", "numpy") or "numpy")
        mod = "np" + mod[len("numpy"):] if mod.startswith("numpy") else mod
        raise host_access_error(f"{mod}.{getattr(func, '__name__', func)}")

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise NkiError(HOST_ACCESS, f"copying or pickling an NKI tensor (`{self.name}`) is not NKI; {_GUIDE}",
                       caller_location())

    def __reduce__(self) -> Any:
        return self.__reduce_ex__(2)

    def __getstate__(self) -> Any:
        return self.__reduce_ex__(2)

    def __copy__(self) -> Any:
        return self.__reduce_ex__(2)

    def __deepcopy__(self, memo: Any) -> Any:
        return self.__reduce_ex__(2)

    def __bool__(self) -> bool:
        raise _truth_error(self)

    def __iter__(self) -> Any:
        raise NkiError("err_dynamic_control_flow_not_supported",
                       f"iterating over tensor `{self.name}` is not supported", caller_location())

    def __contains__(self, item: Any) -> bool:
        raise NkiError("err_dynamic_control_flow_not_supported",
                       f"`in` on tensor `{self.name}` would need its runtime values", caller_location())

    def __index__(self) -> int:
        raise _control_flow(self, "a Python integer")

    def __int__(self) -> int:
        raise _control_flow(self, "a Python integer")

    def __float__(self) -> float:
        raise _control_flow(self, "a Python number")

    def __complex__(self) -> complex:
        raise _control_flow(self, "a Python number")

    # -- Python operators (classic tile arithmetic) ------------------------------------------------
    def _op(self, name: str, *args: Any) -> Any:
        if len(args) == 2 and all(isinstance(a, Tensor) and a.buffer.is_on_chip and a.ndim for a in args):
            a, b = args
            if a.shape[0] != b.shape[0]:
                raise NkiError("err_num_partition_mismatch",
                               f"Python operator on tiles with different partition counts ({describe(a)}, "
                               f"{describe(b)}): partition-dim broadcasting is not supported through operators; "
                               "broadcast explicitly (nl.broadcast_to) or use nl.add/nl.multiply", caller_location())
        return _traced("op." + name, OPERATORS[name], *args)

    def __add__(self, o: Any) -> Any: return self._op("add", self, o)
    def __radd__(self, o: Any) -> Any: return self._op("add", o, self)
    def __sub__(self, o: Any) -> Any: return self._op("subtract", self, o)
    def __rsub__(self, o: Any) -> Any: return self._op("subtract", o, self)
    def __mul__(self, o: Any) -> Any: return self._op("multiply", self, o)
    def __rmul__(self, o: Any) -> Any: return self._op("multiply", o, self)
    def __truediv__(self, o: Any) -> Any: return self._op("divide", self, o)
    def __rtruediv__(self, o: Any) -> Any: return self._op("divide", o, self)
    def __pow__(self, o: Any) -> Any: return self._op("power", self, o)
    def __neg__(self) -> Any: return self._op("negative", self)
    def __lt__(self, o: Any) -> Any: return self._op("less", self, o)
    def __le__(self, o: Any) -> Any: return self._op("less_equal", self, o)
    def __gt__(self, o: Any) -> Any: return self._op("greater", self, o)
    def __ge__(self, o: Any) -> Any: return self._op("greater_equal", self, o)
    def __eq__(self, o: Any) -> Any: return self._op("equal", self, o)  # type: ignore[override]
    def __ne__(self, o: Any) -> Any: return self._op("not_equal", self, o)  # type: ignore[override]
    def __and__(self, o: Any) -> Any: return self._op("bitwise_and", self, o)
    def __or__(self, o: Any) -> Any: return self._op("bitwise_or", self, o)
    def __xor__(self, o: Any) -> Any: return self._op("bitwise_xor", self, o)
    def __invert__(self) -> Any: return self._op("invert", self)
    def __lshift__(self, o: Any) -> Any: return self._op("left_shift", self, o)
    def __rshift__(self, o: Any) -> Any: return self._op("right_shift", self, o)

    def __iadd__(self, o: Any) -> Any:
        return self._accumulate(o, "add")

    def __isub__(self, o: Any) -> Any:
        return self._accumulate(o, "subtract")

    def __imul__(self, o: Any) -> Any:
        return self._accumulate(o, "multiply")

    def _accumulate(self, o: Any, op: str) -> Any:
        """``acc += x``: in-place associative update (the PSUM accumulation idiom)."""
        return _traced("accumulate", _accumulate, self, o, op)


# Every method kernel code can call on a tensor is an NKI call of the traced program (``record.py``).
_TRACED_METHODS = ("reshape", "view", "reinterpret_cast", "ap", "permute", "broadcast", "expand_dim", "expand_dims",
                   "squeeze_dim", "reshape_dim", "flatten_dims", "slice", "select", "is_contiguous", "get_pattern",
                   "is_indirect", "vector_select", "rearrange", "indirect", "astype", "broadcast_to", "assert_shape",
                   "__getitem__", "__setitem__", "__iadd__", "__isub__", "__imul__")
_TRACED_OPERATORS = ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
                     "__rtruediv__", "__pow__", "__neg__", "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__",
                     "__and__", "__or__", "__xor__", "__invert__", "__lshift__", "__rshift__")


def _install_boundaries() -> None:
    from .record import boundary

    for k in _TRACED_METHODS + _TRACED_OPERATORS:
        setattr(Tensor, k, boundary(vars(Tensor)[k], f"Tensor.{k}"))
    for k, is_ne in (("__eq__", False), ("__ne__", True)):
        setattr(Tensor, k, _none_test(vars(Tensor)[k], is_ne))


def _none_test(compare: Callable[[Any, Any], Any], is_ne: bool) -> Callable[[Any, Any], Any]:
    """``t == None`` / ``t != None`` is a Python test of the object (nki-library's ``if bias != None:``), not an
    element-wise compare: no NKI call, so nothing is traced."""

    def cmp(self: Any, o: Any) -> Any:
        if o is None:
            return is_ne
        return compare(self, o)

    cmp.__name__ = compare.__name__
    return cmp


_DESCRIPTOR = vars(Tensor)[_SLOT]
delattr(Tensor, _SLOT)
del Tensor.__slots__  # type: ignore[misc]
del _SLOT
_get: Callable[[Tensor], View] = _DESCRIPTOR.__get__
_set: Callable[[Tensor, View], None] = _DESCRIPTOR.__set__
_new = object.__new__
_install_boundaries()

# -- the simulator's side of a tensor (only ``sim`` modules, verify and simulate use these) ---------------

view_of: Callable[[Tensor], View] = _get
"""The simulator's view behind a kernel's tensor (a TypeError for anything else)."""


def wrap(view: View) -> Tensor:
    """The kernel's handle of a view."""
    t: Tensor = _new(Tensor)
    _set(t, view)
    return t


def values_of(t: Tensor, mask: Any = None) -> np.ndarray:
    """The values a tensor holds (advanced coordinates gathered; masked-out positions may be anything)."""
    return _get(t).read(mask)


def host_copy(t: Tensor) -> np.ndarray:
    """A NumPy copy of a tensor's values in its dtype (kernel outputs, inputs passed on as arguments)."""
    return np.array(_get(t).read(), copy=True)


def write_into(t: Tensor, values: Any, mask: Any = None, accumulate: bool = False) -> None:
    """Store values into a tensor (cast to its dtype), honouring mask and every write check."""
    _get(t).write(values, mask, accumulate)


def storage_of(t: Tensor) -> Storage:
    return _get(t).storage


def describe(t: Any) -> str:
    """``name[shape]`` of a tensor, for messages."""
    return _get(t).describe() if isinstance(t, Tensor) else repr(t)


def mask_values(mask: Any) -> np.ndarray:
    """A mask (classic ``mask=``: index predicate, tile or array) as a bool array."""
    return _view_mask_values(_get(mask) if isinstance(mask, Tensor) else mask)


def allocate(shape: Any, dtype: Any, buffer: Any = None, name: str = "", fill: Any = None,
             par_axis: int | None = None, initial: np.ndarray | None = None) -> Tensor:
    """Create a tensor (``storage.new_storage`` does the checks); on-chip memory without ``fill`` is poisoned.

    ``initial`` (an array the caller owns, already of this shape and dtype) becomes the storage as is."""
    view = View(new_storage(shape, dtype, buffer, name, fill, par_axis, initial))
    if fill is not None or initial is not None:
        sim = runtime.current()
        if sim is not None and sim.tracer is not None:
            sim.tracer.note(view, True)  # an op's result or a filled tile: the instruction wrote all of it
    return wrap(view)


def _assign(t: Tensor, key: Any, value: Any) -> None:
    """``t[key] = value``."""
    dst = _get(t)
    if isinstance(value, Tensor):
        src = _get(value)
        if src.pending and src.storage is dst.storage:
            src.pending = False
            return  # ``t[idx] += x`` already accumulated in place through __iadd__
        dst[_unwrap_key(key)].assign(src)
    else:
        dst[_unwrap_key(key)].assign(value)


def _accumulate(t: Tensor, o: Any, op: str) -> Any:
    """``t += o`` (``t -= o``, ``t *= o``) in place; the result is marked pending for the ``t[idx] = ...`` next."""
    dst = _get(t)
    if op != "add":
        res = t._op(op, t, o)
        dst.write(values_of(res) if isinstance(res, Tensor) else res)
    elif isinstance(o, Tensor):
        src = _get(o)
        dst.write(src.read(), predicate_of(src), accumulate=True)
    else:
        dst.write(np.asarray(o), None, accumulate=True)
    acc = dst.duplicate()
    acc.pending = True
    return wrap(acc)


def _traced(api: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Run a tile operator / assignment as one instruction of the trace (``instrument.py``)."""
    tr, _ = traced_region(api)
    if tr is None:
        return fn(*args)
    try:
        out = fn(*args)
    except BaseException:
        tr.abort()
        raise
    tr.end()
    return out


def wrap_array(arr: np.ndarray, buffer: Buffer, name: str, site: SourceLocation | None = None) -> Tensor:
    """Wrap a NumPy array as a kernel argument / result tensor (no capacity accounting for HBM)."""
    st = Storage(arr, buffer, name, site)
    st.written = True
    return wrap(View(st))


def _unwrap(k: Any) -> Any:
    if isinstance(k, Tensor):
        return _get(k)
    if isinstance(k, slice) and any(isinstance(b, Tensor) for b in (k.start, k.stop, k.step)):
        return slice(_unwrap(k.start), _unwrap(k.stop), _unwrap(k.step))
    return k


def _unwrap_key(key: Any) -> Any:
    """An index with the tensors in it (indirect indices, runtime slice bounds) as views."""
    if isinstance(key, tuple):
        return tuple(_unwrap(k) for k in key)
    return _unwrap(key)


def _layout(v: View) -> tuple[tuple[int, ...], int]:
    if v.coords is not None:
        raise NkiError("sim_unsupported_api", f"strides of an nl.arange-indexed access of `{v.name}` are not "
                       "modelled by the embedded simulator", caller_location())
    item = v.arr.itemsize
    base = v.storage.array
    offset = (v.arr.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // item
    return tuple(int(s) // item for s in v.arr.strides), int(offset)


def _unmodelled(method: str) -> NkiError:
    return NkiError("sim_unsupported_api", f"NkiTensor.{method} is not modelled by the embedded simulator yet",
                    caller_location())


def _truth_error(t: Tensor) -> NkiError:
    loc = caller_location()
    ctx = ast_context(loc) if loc else []
    for node in ctx[:3]:
        if isinstance(node, ast.BoolOp) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
            return NkiError("err_ambiguous_tensor_truth_value",
                            f"Cannot evaluate truth value of a multi-element tensor `{t.name}`; use & | ~ for "
                            "element-wise logic and `is None` for optional arguments", loc)
    return NkiError("err_dynamic_control_flow_not_supported",
                    f"dynamic control-flow depending on tensor value (`{t.name}`) is not supported.", loc)


__all__ = ["OPERATORS", "ParDim", "Storage", "Tensor", "TensorAttributeError", "allocate", "describe",
           "host_access_error", "host_copy", "mask_values", "par_dim", "storage_of", "values_of", "view_of",
           "wrap", "wrap_array", "write_into"]
