"""Tensors of the simulated NeuronCore: storage, views, NKI indexing rules and checked writes.

A ``Storage`` is one allocation (HBM, SBUF or PSUM) holding a NumPy array in the real dtype; fresh
on-chip memory is poisoned (NaN / 4) so reads of unwritten data show. A ``Tensor`` is a view of a
storage: a chain of basic index steps (a NumPy view) plus, for the classic API's ``nl.arange``
indexing, one set of advanced coordinates. All writes go through ``Tensor.write`` which enforces
immutability of kernel inputs, affine-loop write conflicts, bounds and masks.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .. import dtypes
from ..errors import NkiError, Related, SourceLocation
from ..location import caller_location
from . import runtime
from .buffers import Buffer, as_buffer
from .index import Index, Mask
from .memory_model import CLOCK
from .predicate import predicate_of
from .views import ViewsMixin, replay as _replay

# Ops modules register the element-wise implementations used by Python operators on tensors.
OPERATORS: dict[str, Callable[..., Any]] = {}


class Storage:
    """One allocation: the backing array plus facts the checks need."""

    __slots__ = ("array", "buffer", "name", "site", "written", "immutable", "is_param", "mutated", "par_axis",
                 "affine_ids", "interval", "unpoisoned", "predicate", "__weakref__")

    def __init__(self, array: np.ndarray, buffer: Buffer, name: str, site: SourceLocation | None,
                 par_axis: int = 0) -> None:
        self.array = array
        self.buffer = buffer
        self.name = name
        self.site = site
        self.written = False
        self.immutable = False
        self.is_param = False
        self.mutated = False
        self.interval: Any = None  # memory_model.Interval of on-chip storages (liveness)
        self.unpoisoned = False  # fresh memory not yet filled with the poison value (filled lazily)
        # storage-shaped bool array: the elements the one masked classic instruction that produced this tile
        # wrote (see ``predicate_of``); None = not such a tile, or written again since
        self.predicate: np.ndarray | None = None
        self.par_axis = par_axis
        sim = runtime.current()
        self.affine_ids = frozenset(id(f) for f in sim.affine) if sim else frozenset()

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes)


def _partition_error(n: int, limit: int, what: str) -> NkiError:
    return NkiError("err_num_partition_exceed_arch_limit",
                    f"number of partitions {n} of {what} exceed architecture limitation of {limit}.",
                    caller_location())


def allocate(shape: Any, dtype: Any, buffer: Any = None, name: str = "", fill: Any = None,
             par_axis: int | None = None, initial: np.ndarray | None = None) -> "Tensor":
    """Create a tensor; on-chip memory without ``fill`` is poisoned. Checks partition limits.

    ``initial`` (an array the caller owns, already of this shape and dtype) becomes the storage as is:
    the result of an op, written in full, so poisoning and copying it would be wasted work.
    """
    sim = runtime.require("ndarray")
    buf = as_buffer(buffer)
    dt = dtypes.as_dtype(dtype)
    shp, p_axis = _parse_shape(shape)
    if par_axis is not None:
        p_axis = par_axis
    site = caller_location()
    if buf.is_on_chip:
        if len(shp) < 2:
            raise NkiError("sim_invalid_argument",
                           f"Insufficient rank: on-chip tensor '{name or 'tensor'}' of shape {list(shp)} must be "
                           "at least 2-D (partition dim first), e.g. (128, 1)", site)
        if shp[p_axis] > sim.target.pmax:
            raise NkiError("err_num_partition_exceed_arch_limit",
                           f"number of partitions {shp[p_axis]} of tensor '{name or 'tensor'}' {list(shp)} exceed "
                           f"architecture limitation of {sim.target.pmax}.", site)
        if fill is not None and sim.generation == runtime.CLASSIC and buf.params and buf.params[0] == "mod_alloc":
            raise NkiError("err_tensor_creation_on_scratchpad_with_init_value_not_supported",
                           "Creating SBUF/PSUM tensor with init value is not supported in allocated NKI kernels.", site)
        if buf.kind == "psum" and sim.generation == runtime.CLASSIC:
            free_bytes = int(np.prod(shp[p_axis + 1:], dtype=np.int64)) * dt.itemsize
            if free_bytes > sim.target.psum_bank_bytes:
                raise NkiError("sim_psum_bank_overflow",
                               f"PSUM tile '{name or 'tensor'}' {list(shp)} needs {free_bytes} bytes per partition; a "
                               f"PSUM tile must fit one {sim.target.psum_bank_bytes}-byte bank "
                               f"(tile_size.psum_fmax = 512 fp32)", site)
    elif fill is not None:
        raise NkiError("err_hbm_tensor_with_init_value_not_supported",
                       "Creating HBM tensor with init value is not supported.", site)
    if buf.kind == "hbm" and buf.shared and sim.generation == runtime.CLASSIC:
        _check_shared_hbm_scope(sim, site)
    size = int(np.prod(shp, dtype=np.int64)) * dt.itemsize
    if size > 8 << 30:  # a single tensor larger than any device memory is a bug in the kernel
        raise NkiError("sim_memory_limit", f"tensor of {size} bytes exceeds device memory", site)
    if initial is not None:
        arr = initial
    elif fill is None:
        arr = np.empty(shp, dtype=dt)  # poisoned lazily: skipped when the first write covers the whole tensor
    else:
        arr = np.full(shp, fill, dtype=np.float64 if not dtypes.is_int(dt) else np.int64)
        arr = dtypes.cast(arr, dt)
    if buf.kind == "hbm" and buf.shared and sim.grid:
        key = (site.path, site.line, site.column) if site else ("?",)
        n = sim.shared_seen.get(key, 0)
        sim.shared_seen[key] = n + 1
        existing = sim.shared.get(key + (n,))
        if existing is not None and existing.shape == shp and existing.array.dtype == dt:
            return Tensor(existing)
        st = Storage(arr, buf, name or "tensor", site, p_axis)
        sim.shared[key + (n,)] = st
    else:
        st = Storage(arr, buf, name or "tensor", site, p_axis)
    if fill is not None or initial is not None:
        st.written = True
    else:
        st.unpoisoned = True
    if buf.is_on_chip:
        # one block of a block-dim tensor must fit; blocks are allocated as separate tiles (rotated/spilled)
        free_bytes = int(np.prod(shp[p_axis + 1:], dtype=np.int64)) * dt.itemsize
        st.interval = sim.memory.allocate(st, buf.kind, free_bytes)
    sim.record(site, name or "", shp, dtypes.name(dt), buf.label)
    return Tensor(st)


def _check_shared_hbm_scope(sim: runtime.Simulation, site: SourceLocation | None) -> None:
    from ..location import ast_context, user_frame
    import sys

    frame = user_frame(sys._getframe(2))
    if frame is None or sim.kernel_code is None:
        return
    where = None
    if frame.f_code is not sim.kernel_code:
        where = f"helper function '{frame.f_code.co_name}'"
    elif site is not None:
        import ast

        for node in ast_context(site)[1:]:
            # static_range / range loops are unrolled while tracing: published kernels allocate outputs there
            if isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and isinstance(node.iter.func, ast.Attribute) \
                    and node.iter.func.attr in ("affine_range", "sequential_range"):
                where = f"an nl.{node.iter.func.attr} loop"
                break
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                break
    if where is not None:
        raise NkiError("err_shared_hbm_must_in_kernel_level",
                       f"shared_hbm buffer can only be created top level kernel scope (created in {where})", site)


def _parse_shape(shape: Any) -> tuple[tuple[int, ...], int]:
    """Shape tuple and partition axis; ``nl.par_dim(n)`` marks the partition axis (classic)."""
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    dims: list[int] = []
    p_axis = 0
    for k, d in enumerate(shape):
        if isinstance(d, ParDim):
            p_axis = k
            d = d.size
        if isinstance(d, Index):
            raise NkiError("sim_invalid_argument", "tensor shapes must be integers, not nl.arange values",
                           caller_location())
        dims.append(int(d))
    if any(d < 0 for d in dims):
        raise NkiError("sim_invalid_argument", f"negative dimension in shape {dims}", caller_location())
    return tuple(dims), p_axis


class ParDim(int):
    """``nl.par_dim(n)``: marks the partition dimension of a classic tensor."""

    @property
    def size(self) -> int:
        return int(self)


def par_dim(n: int) -> ParDim:
    return ParDim(int(n))


class Tensor(ViewsMixin):
    """A view of a Storage. Basic steps are NumPy views; ``coords`` holds classic advanced indexing."""

    __slots__ = ("storage", "arr", "steps", "coords", "par_axis", "_cshape", "__weakref__")
    __array_priority__ = 1000

    def __init__(self, storage: Storage, view: np.ndarray | None = None, steps: tuple[Any, ...] = (),
                 coords: tuple[np.ndarray, ...] | None = None, par_axis: int | None = None) -> None:
        self.storage = storage
        self.arr = storage.array if view is None else view
        self.steps = steps
        self.coords = coords  # index arrays that broadcast together (kept small: not materialised)
        self._cshape = tuple(np.broadcast_shapes(*[c.shape for c in coords])) if coords else ()
        self.par_axis = storage.par_axis if par_axis is None else par_axis

    # -- attributes ---------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        if self.coords is None:
            return tuple(self.arr.shape)
        return self._cshape

    @property
    def dtype(self) -> np.dtype[Any]:
        return self.arr.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return int(self.arr.dtype.itemsize)

    @property
    def buffer(self) -> Buffer:
        return self.storage.buffer

    @property
    def name(self) -> str:
        return self.storage.name

    @property
    def is_full(self) -> bool:
        return self.coords is None and self.arr.shape == self.storage.array.shape and not self.steps

    def describe(self) -> str:
        return f"{self.name}{list(self.shape)}"

    def __repr__(self) -> str:
        return f"Tensor({self.name}, shape={self.shape}, dtype={dtypes.name(self.dtype)}, buffer={self.buffer!r})"

    def __len__(self) -> int:
        return self.shape[0]

    def __hash__(self) -> int:
        return id(self)

    # -- reading ------------------------------------------------------------------------------
    def read(self, mask: Any = None) -> np.ndarray:
        """Values of the view (advanced coordinates gathered; masked-out positions may be anything)."""
        if self.storage.unpoisoned:
            _poison(self.storage)
        iv = self.storage.interval
        if iv is not None:
            iv.last = CLOCK[0]
        if self.storage.buffer.kind == "psum":
            sim = runtime.current()
            if sim is not None and self.storage in sim.psum_open:
                self.shadow_set(sim.psum_open[self.storage], False)  # reading closes the accumulation group
        if self.coords is None:
            return self.arr
        if mask is not None and mask_values(mask).all():
            mask = None
        coords = self._checked_coords(mask)
        return self.arr[coords]

    def shadow_get(self, shadow: np.ndarray) -> np.ndarray:
        """The elements of a storage-shaped side array that this view covers."""
        region = _replay(shadow, self.steps)
        return region if self.coords is None else region[self._checked_coords(None)]

    def shadow_set(self, shadow: np.ndarray, value: Any) -> None:
        """Assign into the elements of a storage-shaped side array that this view covers."""
        region = _replay(shadow, self.steps)
        if self.coords is None:
            region[...] = value
        else:
            region[self._checked_coords(None)] = value

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = np.array(self.read())
        return a.astype(dtype) if dtype is not None else a

    def _checked_coords(self, mask: Any) -> tuple[np.ndarray, ...]:
        """Coordinates after the static bounds check; out-of-bounds is allowed only where masked off."""
        assert self.coords is not None
        bad_dims = [d for d, c in enumerate(self.coords)
                    if c.size and (int(c.min()) < 0 or int(c.max()) >= self.arr.shape[d])]
        if not bad_dims:
            return self.coords
        valid = None if mask is None else np.broadcast_to(mask_values(mask), self.shape)
        out = []
        for dim, c in enumerate(self.coords):
            n = self.arr.shape[dim]
            if dim in bad_dims:
                full = np.broadcast_to(c, self.shape)
                bad = (full < 0) | (full >= n)
                if valid is not None:
                    bad = bad & valid
                if bad.any():
                    lo, hi = int(c.min()), int(c.max())
                    raise NkiError("err_tensor_access_out_of_bound",
                                   f"Out-of-bound access for tensor `{self.name}` on dimension {dim}: index range "
                                   f"[{lo}, {hi}] exceed dimension size of {n}", caller_location(),
                                   _created_here(self.storage))
                c = np.clip(c, 0, max(n - 1, 0))
            out.append(c)
        return tuple(out)

    # -- indexing -----------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> "Tensor":
        sim = runtime.current()
        if sim is not None:
            sim.tick()
        keys = key if isinstance(key, tuple) else (key,)
        keys = tuple(_dynamic_index(k) for k in keys)
        if self.coords is not None:
            return self._index_advanced_view(keys)
        if any(isinstance(k, (Index, np.ndarray)) for k in keys):
            return self._index_advanced(keys, sim)
        return self._index_basic(keys, sim)

    def _index_basic(self, keys: tuple[Any, ...], sim: runtime.Simulation | None) -> "Tensor":
        keys = _expand_ellipsis(keys, self.ndim)
        if len(keys) > self.ndim:
            raise NkiError("err_tensor_access_out_of_bound",
                           f"too many indices for tensor `{self.name}` of rank {self.ndim}", caller_location())
        on_chip = self.buffer.is_on_chip
        norm: list[Any] = []
        kept = 0
        new_par = 0
        int_free: list[int] = []
        for dim, k in enumerate(keys):
            n = self.arr.shape[dim]
            if isinstance(k, slice):
                norm.append(self._check_slice(k, n, dim))
                if dim < self.par_axis:
                    new_par += 1
                kept += 1
            elif k is None:
                norm.append(None)
            else:
                i = _as_int(k)
                if i < -n or i >= n:
                    raise NkiError("err_tensor_access_out_of_bound",
                                   f"Out-of-bound access for tensor `{self.name}` on dimension {dim}: index {i} "
                                   f"exceed dimension size of {n}", caller_location(), _created_here(self.storage))
                if i < 0:
                    i += n
                if on_chip and dim == self.par_axis:
                    norm.append(slice(i, i + 1))  # an integer on the partition dim keeps a size-1 dim
                    kept += 1
                elif on_chip and dim > self.par_axis:
                    int_free.append(len(norm))
                    norm.append(i)
                else:
                    norm.append(i)
        total_kept = kept + (self.ndim - len(keys))
        if on_chip and total_kept < 2 and int_free:
            last = int_free[-1]  # keep the last integer-indexed free dim as size 1 so the tile stays 2-D
            i = norm[last]
            norm[last] = slice(i, i + 1)
        nkey = tuple(norm)
        view = self.arr[nkey]
        return Tensor(self.storage, view, self.steps + (nkey,), None, new_par if on_chip else 0)

    def _check_slice(self, k: slice, n: int, dim: int) -> slice:
        start, stop, step = k.start, k.stop, k.step
        for v in (start, stop, step):
            if isinstance(v, Index):
                raise NkiError("err_unsupported_mixing_basic_advanced_tensor_indexing",
                               "nl.arange values cannot be used as slice bounds", caller_location())
        step = 1 if step is None else _as_int(step)
        if step == 0:
            raise NkiError("sim_invalid_argument", "slice step cannot be zero", caller_location())
        if step > 0:
            s = 0 if start is None else _as_int(start)
            e = n if stop is None else _as_int(stop)
            if s < 0:
                s += n
            if e < 0:
                e += n
            if s < 0 or e > n or s > n:
                raise NkiError("err_tensor_access_out_of_bound",
                               f"Out-of-bound access for tensor `{self.name}` on dimension {dim}: index range "
                               f"[{s}, {e - 1}] exceed dimension size of {n}", caller_location(),
                               _created_here(self.storage))
            return slice(s, max(e, s), step)
        return slice(start, stop, step)

    def _index_advanced(self, keys: tuple[Any, ...], sim: runtime.Simulation | None) -> "Tensor":
        if any(isinstance(k, slice) or k is Ellipsis for k in keys):
            raise NkiError("err_unsupported_mixing_basic_advanced_tensor_indexing",
                           "Mixing basic tensor indexing and advanced tensor indexing is not supported.",
                           caller_location())
        if (self.buffer.is_on_chip or self.ndim >= 2) and any(isinstance(k, Index) and k.ndim == 1 for k in keys):
            raise NkiError("err_1d_arange_not_supported",
                           f"indexing tensor `{self.name}` with 1d arange is not supported; use "
                           "nl.arange(n)[:, None] for the partition axis and nl.arange(n)[None, :] for free axes",
                           caller_location())
        if len(keys) > self.ndim:
            raise NkiError("err_tensor_access_out_of_bound",
                           f"too many indices for tensor `{self.name}` of rank {self.ndim}", caller_location())
        arrays = [k.values if isinstance(k, Index) else (k if isinstance(k, np.ndarray) else np.asarray(_as_int(k)))
                  for k in keys]
        missing = self.ndim - len(keys)
        if missing:
            base = np.broadcast_shapes(*[a.shape for a in arrays])
            extra = []
            for j in range(missing):
                n = self.arr.shape[len(keys) + j]
                extra.append(np.arange(n).reshape((1,) * len(base) + (1,) * j + (n,) + (1,) * (missing - j - 1)))
            arrays = [a.reshape(a.shape + (1,) * missing) for a in arrays] + extra
        try:
            bshape = np.broadcast_shapes(*[a.shape for a in arrays])
        except ValueError:
            raise NkiError("sim_shape_mismatch", f"index arrays of shapes {[a.shape for a in arrays]} do not broadcast",
                           caller_location()) from None
        basic = _as_slices(arrays, bshape, self.arr.shape)
        if basic is not None:  # the common `base + arange` grid: an exact NumPy view, no gather/scatter
            return Tensor(self.storage, self.arr[basic], self.steps + (basic,), None, 0)
        return Tensor(self.storage, self.arr, self.steps, tuple(arrays), 0)

    def _index_advanced_view(self, keys: tuple[Any, ...]) -> "Tensor":
        assert self.coords is not None
        k2 = tuple(k.values if isinstance(k, Index) else k for k in keys)
        coords = tuple(np.asarray(np.broadcast_to(c, self.shape)[k2]) for c in self.coords)
        return Tensor(self.storage, self.arr, self.steps, coords, 0)

    # -- writing ------------------------------------------------------------------------------
    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(value, _Accumulated) and value.pending and value.storage is self.storage:
            value.pending = False
            return  # ``t[idx] += x`` already accumulated in place through __iadd__
        self[key].assign(value)

    def assign(self, value: Any) -> None:
        """``dst[...] = src``: copy with free-dim broadcast from src; dst must not be smaller.

        A masked classic instruction's result writes only its predicated elements (``predicate_of``).
        """
        src = value.read() if isinstance(value, Tensor) else np.asarray(value)
        if isinstance(value, Tensor) and value.buffer.is_hbm and self.buffer.is_on_chip:
            raise NkiError("err_unsupported_memory",
                           f"cannot assign HBM tensor `{value.name}` to on-chip tensor `{self.name}`; use nl.load",
                           caller_location())
        self.write(src, predicate_of(value))

    def write(self, values: Any, mask: Any = None, accumulate: bool = False) -> None:
        """Store values into this view (cast to its dtype), honouring mask and all write checks."""
        sim = runtime.current()
        st = self.storage
        if st.interval is not None:
            st.interval.last = CLOCK[0]
        if st.unpoisoned and (accumulate or not (mask is None and self.coords is None and self.arr.size == st.array.size)):
            _poison(st)  # a partial first write: the rest must read as fresh (poisoned) memory
        if st.immutable:
            # SDK >= 2.21 compilers reject this; the SDK's own simulation-mode API examples still write
            # outputs passed in as parameters, so the simulator reports it (once) and carries on
            st.immutable = False
            if sim is not None:
                sim.warnings.append(NkiError(
                    "err_cannot_update_immutable_parameter",
                    f"Cannot update immutable parameter `{st.name}`: kernel inputs are read-only unless annotated "
                    "nt.mutable_tensor (neuronx-cc >= 2.21 rejects this); write into a new shared_hbm output instead",
                    caller_location(), _created_here(st), severity="warning"))
        vals = np.asarray(values)
        shape = self.shape
        if vals.shape != shape:
            try:
                vals = np.broadcast_to(vals, shape)
            except ValueError:
                src_shape = list(vals.shape)
                raise NkiError("err_store_dst_shape_smaller_than_other_shape",
                               f"Illegal assignment destination shape: shape {list(shape)} of `{self.name}` is "
                               f"smaller than or incompatible with source shape {src_shape}.",
                               caller_location()) from None
        mvals = None
        if mask is not None:
            small = mask_values(mask)
            if not small.all():  # an all-true mask (every full tile) costs nothing
                mvals = np.broadcast_to(small, shape)
        if sim is not None and st.buffer.kind == "psum" and st in sim.psum_open:
            self.shadow_set(sim.psum_open[st], False)  # any other write ends the accumulation group
        if sim is not None and sim.affine and not accumulate:
            self._check_affine(sim, mvals)
        if self.coords is None:
            target = self.arr
            if accumulate:
                upd = dtypes.cast(dtypes.to_fp32(target) + dtypes.to_fp32(vals), target.dtype)
            else:
                upd = dtypes.cast(vals, target.dtype)
            if mvals is None:
                target[...] = upd
            else:
                target[mvals] = np.broadcast_to(upd, shape)[mvals]
        else:
            coords = self._checked_coords(mvals)
            if mvals is not None:
                coords = tuple(np.broadcast_to(c, shape)[mvals] for c in coords)
                vals = vals[mvals]
            cur = self.arr[coords]
            if accumulate:
                upd = dtypes.cast(dtypes.to_fp32(cur) + dtypes.to_fp32(vals), self.arr.dtype)
            else:
                upd = dtypes.cast(vals, self.arr.dtype)
            self.arr[coords] = upd
        st.written = True
        st.unpoisoned = False
        st.predicate = None  # written again: no longer just the result of one masked instruction
        if st.is_param:
            st.mutated = True

    def _check_affine(self, sim: runtime.Simulation, mvals: np.ndarray | None) -> None:
        st = self.storage
        for frame in sim.affine:
            if id(frame) in st.affine_ids:
                continue
            owners = frame.owners.get(id(st))
            if owners is None:  # 0 = not written in this loop, k + 1 = last written by iteration k
                owners = np.zeros(st.array.shape, dtype=np.int32)
                frame.owners[id(st)] = owners
            region = _replay(owners, self.steps)
            if self.coords is not None:
                coords = self._checked_coords(mvals)
                if mvals is not None:
                    coords = tuple(np.broadcast_to(c, self.shape)[mvals] for c in coords)
                cur = region[coords]
            else:
                cur = region if mvals is None else region[mvals]
            mark = frame.iteration + 1
            if cur.size and int(cur.max()) != 0 and int(cur.min()) != mark:  # fast paths: untouched / all ours
                clash = (cur > 0) & (cur != mark)
                if clash.any() and not frame.reported:
                    # reported, not raised: compilers do not always prove it, and published kernels that ran on
                    # hardware contain such writes; the simulation continues in program order
                    frame.reported = True
                    prev = int(cur[clash].flat[0]) - 1
                    sim.warnings.append(NkiError(
                        "err_unexpected_output_dependencies",
                        f"Unexpected output dependencies, different iterations of {frame.var_name} loop (iterations "
                        f"{prev} and {frame.iteration}) write to `{st.name}`: on hardware iterations may run in any "
                        "order; index the destination with the loop variable or use nl.sequential_range",
                        caller_location(), _created_here(st), severity="warning"))
            if self.coords is not None:
                region[coords] = mark
            elif mvals is None:
                region[...] = mark
            else:
                region[mvals] = mark

    def _derive(self, view: np.ndarray, step: Any, par_axis: int = 0) -> "Tensor":
        """A new view of the same storage, one step further down the chain."""
        if self.coords is not None:
            raise NkiError("sim_invalid_argument", f"cannot take a view of an nl.arange-indexed access of "
                           f"`{self.name}`", caller_location())
        return Tensor(self.storage, view, self.steps + (step,), None, par_axis)

    # -- Python operators (classic tile arithmetic) -------------------------------------------
    def _op(self, name: str, *args: Any) -> Any:
        if len(args) == 2 and all(isinstance(a, Tensor) and a.buffer.is_on_chip and a.ndim for a in args):
            a, b = args
            if a.shape[0] != b.shape[0]:
                raise NkiError("err_num_partition_mismatch",
                               f"Python operator on tiles with different partition counts ({a.describe()}, "
                               f"{b.describe()}): partition-dim broadcasting is not supported through operators; "
                               "broadcast explicitly (nl.broadcast_to) or use nl.add/nl.multiply", caller_location())
        return OPERATORS[name](*args)

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
        if op != "add":
            res = self._op(op, self, o)
            self.write(res.read() if isinstance(res, Tensor) else res)
            return _Accumulated(self)
        delta = o.read() if isinstance(o, Tensor) else np.asarray(o)
        self.write(delta, predicate_of(o), accumulate=True)
        return _Accumulated(self)

    def __bool__(self) -> bool:
        raise _truth_error(self)

    def __iter__(self) -> Any:
        raise NkiError("err_dynamic_control_flow_not_supported",
                       f"iterating over tensor `{self.name}` is not supported", caller_location())

    def __index__(self) -> int:
        raise NkiError("err_dynamic_control_flow_not_supported",
                       f"tensor `{self.name}` holds runtime values and cannot be used as a Python integer",
                       caller_location())

    def __float__(self) -> float:
        raise NkiError("err_dynamic_control_flow_not_supported",
                       f"tensor `{self.name}` holds runtime values and cannot be used as a Python number",
                       caller_location())


class _Accumulated(Tensor):
    """The same view after ``t += x``; ``__setitem__`` recognises it and does not write twice."""

    __slots__ = ("pending",)

    def __init__(self, t: Tensor) -> None:
        super().__init__(t.storage, t.arr, t.steps, t.coords, t.par_axis)
        self.pending = True


def _truth_error(t: Tensor) -> NkiError:
    import ast

    from ..location import ast_context

    loc = caller_location()
    ctx = ast_context(loc) if loc else []
    for node in ctx[:3]:
        if isinstance(node, ast.BoolOp) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
            return NkiError("err_ambiguous_tensor_truth_value",
                            f"Cannot evaluate truth value of a multi-element tensor `{t.name}`; use & | ~ for "
                            "element-wise logic and `is None` for optional arguments", loc)
    return NkiError("err_dynamic_control_flow_not_supported",
                    f"dynamic control-flow depending on tensor value (`{t.name}`) is not supported.", loc)


def _as_slices(arrays: list[np.ndarray], bshape: tuple[int, ...], dims: tuple[int, ...]) -> tuple[Any, ...] | None:
    """Basic-index equivalent of advanced coordinates when each one is a scalar or an in-bounds arithmetic
    progression along its own result axis, in storage order (``t*128 + arange(128)[:, None]`` ...)."""
    key: list[Any] = []
    last_axis = -1
    for dim, a in enumerate(arrays):
        if a.size == 1 and a.ndim == 0:
            v = int(a)
            if not 0 <= v < dims[dim]:
                return None
            key.append(v)
            continue
        axes = [k for k, n in enumerate(a.shape) if n != 1]
        if len(axes) != 1 or a.ndim != len(bshape) or axes[0] <= last_axis:
            return None
        axis = axes[0]
        last_axis = axis
        flat = a.reshape(-1)
        n = flat.size
        start = int(flat[0])
        step = int(flat[1] - flat[0]) if n > 1 else 1
        if step <= 0 or not np.array_equal(flat, start + step * np.arange(n)):
            return None
        stop = start + step * (n - 1) + 1
        if start < 0 or stop > dims[dim]:
            return None
        key.append(slice(start, stop, step))
    # every result axis must come from exactly one coordinate (no broadcast-only axes)
    n_axes = sum(1 for k in key if isinstance(k, slice))
    return tuple(key) if n_axes == len(bshape) else None


def _poison(st: Storage) -> None:
    st.array.fill(dtypes.poison(st.array.dtype))
    st.unpoisoned = False


def _created_here(st: Storage) -> tuple[Related, ...]:
    if st.site is None:
        return ()
    return (Related(st.site, f"`{st.name}` {list(st.shape)} in {st.buffer.label} created here"),)


def _expand_ellipsis(keys: tuple[Any, ...], ndim: int) -> tuple[Any, ...]:
    if any(k is Ellipsis for k in keys):
        i = next(j for j, k in enumerate(keys) if k is Ellipsis)
        fill = ndim - (len(keys) - 1 - sum(1 for k in keys if k is None))
        return keys[:i] + (slice(None),) * max(fill, 0) + keys[i + 1:]
    return keys


def _as_int(k: Any) -> int:
    if isinstance(k, (bool, np.bool_)):
        return int(k)
    if isinstance(k, (int, np.integer)):
        return int(k)
    if isinstance(k, Index):
        raise NkiError("err_unsupported_mixing_basic_advanced_tensor_indexing",
                       "nl.arange values cannot be mixed with slices", caller_location())
    if isinstance(k, Tensor):
        raise NkiError("err_dynamic_control_flow_not_supported",
                       f"tensor `{k.name}` holds runtime values and cannot be used as a static index",
                       caller_location())
    try:
        return int(k.__index__())
    except Exception:
        raise NkiError("sim_invalid_argument", f"unsupported index {k!r}", caller_location()) from None


def _dynamic_index(k: Any) -> Any:
    """A tensor used as an index (classic indirect DMA) becomes its integer values."""
    if isinstance(k, Tensor):
        vals = k.read()
        if not dtypes.is_int(vals.dtype) and not np.all(np.isfinite(vals)):
            raise NkiError("err_tensor_access_out_of_bound",
                           f"indirect index tensor `{k.name}` holds non-finite values", caller_location())
        return np.asarray(vals).astype(np.int64)
    return k


def mask_values(mask: Any) -> np.ndarray:
    if isinstance(mask, Mask):
        return mask.values
    if isinstance(mask, Tensor):
        return mask.read().astype(bool)
    return np.asarray(mask, dtype=bool)


def wrap_array(arr: np.ndarray, buffer: Buffer, name: str, site: SourceLocation | None = None) -> Tensor:
    """Wrap a NumPy array as a kernel argument / result tensor (no capacity accounting for HBM)."""
    st = Storage(arr, buffer, name, site)
    st.written = True
    return Tensor(st)
