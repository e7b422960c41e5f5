"""Free-axis reductions and the fused normalisations of ``nki.language`` (sum, max, mean, softmax ...).

Reductions never run over the partition axis (dim 0); the result of reducing a 2-D tile keeps a
size-1 free dim so it stays a valid ``(P, 1)`` tile.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from nki_agent.toolchain.facts import dtypes
from nki_agent.toolchain.facts.errors import NkiError
from ...location import caller_location
from ..tensor import Tensor
from . import common as c

_REDUCERS: dict[str, Callable[..., Any]] = {
    "sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean, "prod": np.prod, "var": np.var,
    "all": lambda a, axis, keepdims: np.all(a != 0, axis=axis, keepdims=keepdims).astype(np.float32),
}


def normalise_axes(api: str, axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        axes = tuple(range(1, ndim))
    elif isinstance(axis, (list, tuple)):
        axes = tuple(int(a) for a in axis)
    else:
        axes = (int(axis),)
    out = []
    for a in axes:
        if a < 0:
            a += ndim
        if a < 0 or a >= ndim:
            raise NkiError("sim_invalid_argument", f"axis {a} out of range for a {ndim}-D tile in '{api}'",
                           caller_location())
        if a == 0:
            raise NkiError("sim_invalid_argument",
                           f"'{api}' cannot reduce along the partition dimension (axis 0); transpose first or use a "
                           "matmul with a ones vector", caller_location())
        out.append(a)
    return tuple(sorted(set(out)))


def _shape_result(res: np.ndarray, keepdims: bool, src_shape: tuple[int, ...], axes: tuple[int, ...]) -> np.ndarray:
    if keepdims:
        return res
    if res.ndim < 2:
        return res.reshape(src_shape[0], 1)  # stay a 2-D (P, 1) tile
    return res


def reduce(api: str, x: Any, axis: Any, dtype: Any = None, mask: Any = None, keepdims: bool = False,
           negate: bool = False) -> Tensor:
    c.sim(api)
    c.require_on_chip(api, "x", x)
    m = c.mask_of(mask)
    vals = c.fp32(x, m)
    axes = normalise_axes(api, axis, vals.ndim)
    fn = _REDUCERS[api]
    if m is not None:
        mm = np.broadcast_to(m, vals.shape)
        ident = {"sum": 0.0, "max": -np.inf, "min": np.inf, "prod": 1.0, "all": 1.0}.get(api)
        if ident is not None:
            vals = np.where(mm, vals, ident)
    with np.errstate(all="ignore"):
        res = fn(vals, axis=axes, keepdims=keepdims)
    if negate:
        res = -res
    res = _shape_result(np.asarray(res, dtype=np.float32), keepdims, vals.shape, axes)
    out_dt = dtypes.as_dtype(dtype) if dtype is not None else (
        dtypes.float32 if api == "mean" and isinstance(x, Tensor) and dtypes.is_int(x.dtype)
        else (x.dtype if isinstance(x, Tensor) else dtypes.float32))
    if api == "all" and dtype is None:
        out_dt = dtypes.bool_
    return c.emit(res, out_dt, fresh=True)


def _make(api: str) -> Callable[..., Tensor]:
    def f(x: Any, axis: Any = None, dtype: Any = None, mask: Any = None, keepdims: bool = False, **kw: Any) -> Tensor:
        return reduce(api, x, axis, dtype=dtype, mask=mask, keepdims=keepdims)

    f.__name__ = api
    return f


FUNCTIONS = {name: _make(name) for name in _REDUCERS}


def softmax(x: Any, axis: Any = -1, dtype: Any = None, compute_dtype: Any = None, mask: Any = None, **kw: Any) -> Tensor:
    c.sim("softmax")
    c.require_on_chip("softmax", "x", x)
    m = c.mask_of(mask)
    vals = c.fp32(x, m)
    axes = normalise_axes("softmax", axis, vals.ndim)
    with np.errstate(all="ignore"):
        e = np.exp(vals - np.max(vals, axis=axes, keepdims=True))
        res = e / np.sum(e, axis=axes, keepdims=True)
    return c.emit(res, c.result_dtype(dtype, x), m)


def rms_norm(x: Any, w: Any, axis: Any, n: Any = None, epsilon: float = 1e-6, dtype: Any = None,
             compute_dtype: Any = None, mask: Any = None, **kw: Any) -> Tensor:
    c.sim("rms_norm")
    m = c.mask_of(mask)
    vals = c.fp32(x, m)
    axes = normalise_axes("rms_norm", axis, vals.ndim)
    count = float(n) if n is not None else float(np.prod([vals.shape[a] for a in axes]))
    with np.errstate(all="ignore"):
        rms = np.sqrt(np.sum(vals * vals, axis=axes, keepdims=True) / count + epsilon)
        res = vals / rms * c.fp32(w)
    return c.emit(res, c.result_dtype(dtype, x), m)
