"""View methods of ``NkiTensor`` (new API): reshape, permute, broadcast, slice/select, ``ap`` access patterns.

Views share storage. Each view records a step so the same view can be replayed on side arrays of
the storage's shape (write owners, PSUM accumulation flags). The methods here act on the simulator's
``view.View``; kernel code reaches them through the ``tensor.Tensor`` methods of the same names.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nki_agent.toolchain.facts import dtypes
from nki_agent.toolchain.facts.errors import NkiError
from ..location import caller_location


class ReshapeStep(tuple):  # type: ignore[type-arg]
    """Reshape to this shape."""


class PermuteStep(tuple):  # type: ignore[type-arg]
    """Transpose with these axes."""


class BroadcastStep(tuple):  # type: ignore[type-arg]
    """(dim, size): zero-stride broadcast of a size-1 dim."""


class DtypeStep:
    """Reinterpretation as another dtype of the same size (side arrays keep their element grid)."""

    def __init__(self, dtype: Any) -> None:
        self.dtype = dtype


class APStep:
    """An access pattern on the base storage: [[stride, num], ...] in elements plus an offset."""

    def __init__(self, pattern: list[tuple[int, int]], offset: int) -> None:
        self.pattern = pattern
        self.offset = offset

    def apply(self, base: np.ndarray) -> np.ndarray:
        flat = base.reshape(-1)
        shape = [n for _, n in self.pattern]
        strides = [s * base.itemsize for s, _ in self.pattern]
        return np.lib.stride_tricks.as_strided(flat[self.offset:], shape=shape, strides=strides)


def replay(arr: np.ndarray, steps: tuple[Any, ...]) -> np.ndarray:
    """Apply a view chain to a storage-shaped array."""
    for step in steps:
        if isinstance(step, ReshapeStep):
            arr = arr.reshape(tuple(step))
        elif isinstance(step, PermuteStep):
            arr = arr.transpose(tuple(step))
        elif isinstance(step, BroadcastStep):
            dim, size = step
            shape = list(arr.shape)
            shape[dim] = size
            arr = np.broadcast_to(arr, shape)
        elif isinstance(step, DtypeStep):
            continue
        elif isinstance(step, APStep):
            arr = step.apply(arr)
        else:
            arr = arr[step]
    return arr


def _fail(msg: str) -> NkiError:
    return NkiError("sim_invalid_argument", msg, caller_location())


class ViewsMixin:
    """View-making methods of ``view.View`` (requires ``arr``, ``shape``, ``buffer``, ``_derive``)."""

    __slots__ = ()

    arr: np.ndarray

    def _dim(self, dim: int) -> int:
        nd = len(self.shape)  # type: ignore[attr-defined]
        d = dim + nd if dim < 0 else dim
        if not 0 <= d < nd:
            raise _fail(f"dim {dim} out of range for a {nd}-D tensor")
        return d

    def reshape(self, *shape: Any, **kw: Any) -> Any:
        if "shape" in kw:
            shape = (kw["shape"],)
        shp = tuple(int(s) for s in (shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape))
        cur = tuple(self.shape)  # type: ignore[attr-defined]
        if int(np.prod(shp, dtype=np.int64)) != int(np.prod(cur, dtype=np.int64)):
            raise _fail(f"cannot reshape {list(cur)} into {list(shp)}: element counts differ")
        if self.buffer.is_on_chip and shp and cur and shp[0] != cur[0]:  # type: ignore[attr-defined]
            raise _fail(f"reshape of an on-chip tensor must keep the partition dim {cur[0]}, got {list(shp)}")
        view = self.arr.reshape(shp)
        if view.size and not np.shares_memory(view, self.arr):
            raise _fail("this view is not contiguous and cannot be reshaped")
        return self._derive(view, ReshapeStep(shp))  # type: ignore[attr-defined]

    def expand_dim(self, dim: int) -> Any:
        shp = list(self.shape)  # type: ignore[attr-defined]
        d = dim + len(shp) + 1 if dim < 0 else dim
        shp.insert(d, 1)
        return self._derive(self.arr.reshape(shp), ReshapeStep(tuple(shp)))  # type: ignore[attr-defined]

    def squeeze_dim(self, dim: int) -> Any:
        d = self._dim(dim)
        shp = list(self.shape)  # type: ignore[attr-defined]
        if shp[d] != 1:
            raise _fail(f"squeeze_dim({dim}) of a dim of size {shp[d]}")
        del shp[d]
        return self._derive(self.arr.reshape(shp), ReshapeStep(tuple(shp)))  # type: ignore[attr-defined]

    def reshape_dim(self, dim: int, shape: Any) -> Any:
        d = self._dim(dim)
        shp = list(self.shape)  # type: ignore[attr-defined]
        new = shp[:d] + [int(x) for x in shape] + shp[d + 1:]
        return self.reshape(tuple(new))

    def flatten_dims(self, start_dim: int, end_dim: int) -> Any:
        a, b = self._dim(start_dim), self._dim(end_dim)
        shp = list(self.shape)  # type: ignore[attr-defined]
        new = shp[:a] + [int(np.prod(shp[a:b + 1]))] + shp[b + 1:]
        return self.reshape(tuple(new))

    def permute(self, dims: Any) -> Any:
        axes = tuple(int(d) for d in dims)
        if self.buffer.is_on_chip and axes and axes[0] != 0:  # type: ignore[attr-defined]
            raise _fail(f"permute{list(axes)} would move the partition dim of an on-chip tensor")
        return self._derive(self.arr.transpose(axes), PermuteStep(axes))  # type: ignore[attr-defined]

    def broadcast(self, dim: int, size: int) -> Any:
        d = self._dim(dim)
        shp = list(self.shape)  # type: ignore[attr-defined]
        if shp[d] != 1:
            raise _fail(f"broadcast({dim}, {size}) needs a size-1 dim, got {shp[d]}")
        if d == 0 and self.buffer.is_on_chip:  # type: ignore[attr-defined]
            raise _fail("cannot broadcast the partition dim of an on-chip tensor with a view")
        shp[d] = int(size)
        return self._derive(np.broadcast_to(self.arr, shp), BroadcastStep((d, int(size))))  # type: ignore[attr-defined]

    def slice(self, dim: int, start: int, end: int, step: int = 1) -> Any:
        d = self._dim(dim)
        key = tuple(slice(None) for _ in range(d)) + (slice(start, end, step),)
        return self[key]  # type: ignore[index]

    def select(self, dim: int, index: Any) -> Any:
        d = self._dim(dim)
        key = tuple(slice(None) for _ in range(d)) + (index,)
        return self[key]  # type: ignore[index]

    def view(self, dtype: Any) -> Any:
        """Reinterpret the bytes as another dtype of the same size (``NkiTensor.view``)."""
        dt = dtypes.as_dtype(dtype)
        if dt.itemsize != self.arr.dtype.itemsize:
            raise _fail("view() between dtypes of different sizes is not modelled by the simulator yet")
        return self._derive(self.arr.view(dt), DtypeStep(dt), getattr(self, "par_axis", 0))  # type: ignore[attr-defined]

    def ap(self, pattern: Any, offset: Any = 0, scalar_offset: Any = None, vector_offset: Any = None,
           indirect_dim: int = 0, dtype: Any = None) -> Any:
        """Access pattern on the base storage (``.ap`` ignores the view it is called on)."""
        if scalar_offset is not None or vector_offset is not None:
            raise NkiError("sim_unsupported_api", "dynamic .ap offsets are not modelled by the simulator yet",
                           caller_location())
        pat = [(int(s), int(n)) for s, n in pattern]
        st = self.storage  # type: ignore[attr-defined]
        base = st.array
        last = int(offset) + sum((n - 1) * s for s, n in pat)
        if int(offset) < 0 or last >= base.size or any(s < 0 for s, _ in pat):
            raise NkiError("err_tensor_access_out_of_bound",
                           f"access pattern {pat} at offset {offset} leaves tensor `{st.name}` of {base.size} elements",
                           caller_location())
        step = APStep(pat, int(offset))
        from .view import View

        return View(st, step.apply(base), (step,), None, 0)

    def is_contiguous(self) -> bool:
        return bool(self.arr.flags.c_contiguous)
