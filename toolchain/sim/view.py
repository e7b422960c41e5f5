"""Views of simulator storages: NKI indexing rules, reads, checked writes (the simulator's side of a tensor).

A ``View`` is a chain of basic index steps over one ``Storage`` (a NumPy view) plus, for the classic
API's ``nl.arange`` indexing, one set of advanced coordinates. All writes go through ``View.write``,
which enforces immutability of kernel inputs, affine-loop write conflicts, bounds and masks, and
notes HBM writes in the launch's store log (``stores.py``). Views
belong to the simulator: kernel code gets ``tensor.Tensor`` handles, whose view only ``sim``
modules can reach (``tensor.view_of``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nki_agent.toolchain.facts import dtypes
from nki_agent.toolchain.facts.errors import NkiError
from ..location import caller_location
from . import runtime
from .compile_checks import is_reduction, proven_overlap
from .buffers import Buffer
from .index import Index, Mask
from .predicate import predicate_of
from .storage import Storage, created_here, poison
from .views import ViewsMixin, replay


class View(ViewsMixin):
    """A view of a Storage. Basic steps are NumPy views; ``coords`` holds classic advanced indexing.

    ``pending``: this view is the result of ``t += x`` (already accumulated in place), which the
    ``t[idx] = ...`` that Python runs next must not write again.
    """

    __slots__ = ("storage", "arr", "steps", "coords", "par_axis", "_cshape", "pending")

    def __init__(self, storage: Storage, view: np.ndarray | None = None, steps: tuple[Any, ...] = (),
                 coords: tuple[np.ndarray, ...] | None = None, par_axis: int | None = None) -> None:
        self.storage = storage
        self.arr = storage.array if view is None else view
        self.steps = steps
        self.coords = coords  # index arrays that broadcast together (kept small: not materialised)
        self._cshape = tuple(np.broadcast_shapes(*[c.shape for c in coords])) if coords else ()
        self.par_axis = storage.par_axis if par_axis is None else par_axis
        self.pending = False

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

    def duplicate(self) -> "View":
        """Another view object over exactly the same elements."""
        return View(self.storage, self.arr, self.steps, self.coords, self.par_axis)

    def __repr__(self) -> str:
        return f"View({self.name}, shape={self.shape}, dtype={dtypes.name(self.dtype)}, buffer={self.buffer!r})"

    # -- reading ------------------------------------------------------------------------------
    def read(self, mask: Any = None) -> np.ndarray:
        """Values of the view (advanced coordinates gathered; masked-out positions may be anything)."""
        if self.storage.unpoisoned:
            poison(self.storage)
        sim = runtime.current()
        if sim is not None:
            iv = self.storage.interval
            if iv is not None:
                iv.last = sim.instructions
            if sim.tracer is not None:
                sim.tracer.note(self, False)
        if self.storage.buffer.kind == "psum":
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
        region = replay(shadow, self.steps)
        return region if self.coords is None else region[self._checked_coords(None)]

    def shadow_set(self, shadow: np.ndarray, value: Any) -> None:
        """Assign into the elements of a storage-shaped side array that this view covers."""
        region = replay(shadow, self.steps)
        if self.coords is None:
            region[...] = value
        else:
            region[self._checked_coords(None)] = value

    def in_bounds(self) -> np.ndarray | None:
        """Where this view's coordinates (dynamic indices included) fall inside the tensor; None: everywhere."""
        if self.coords is None:
            return None
        ok = np.ones(self.shape, dtype=bool)
        for dim, c in enumerate(self.coords):
            ok &= (c >= 0) & (c < self.arr.shape[dim])
        return ok

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
                                   created_here(self.storage))
                c = np.clip(c, 0, max(n - 1, 0))
            out.append(c)
        return tuple(out)

    # -- indexing -----------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> "View":
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

    def _index_basic(self, keys: tuple[Any, ...], sim: runtime.Simulation | None) -> "View":
        keys = _expand_ellipsis(keys, self.ndim)
        if len(keys) > self.ndim:
            raise NkiError("err_tensor_access_out_of_bound",
                           f"too many indices for tensor `{self.name}` of rank {self.ndim}", caller_location())
        on_chip = self.buffer.is_on_chip
        norm: list[Any] = []
        kept = 0
        new_par = 0
        int_free: list[int] = []
        overrun: NkiError | None = None
        for dim, k in enumerate(keys):
            n = self.arr.shape[dim]
            if isinstance(k, slice):
                try:
                    norm.append(self._check_slice(k, n, dim))
                except NkiError as e:
                    if sim is None or sim.generation != runtime.CLASSIC or e.code != "err_tensor_access_out_of_bound":
                        raise
                    overrun = overrun or e  # a mask may turn the rows outside off (_overrun_view)
                    norm.append(_full_range(k, n))
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
                                   f"exceed dimension size of {n}", caller_location(), created_here(self.storage))
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
        new_par += max(0, self.par_axis - len(keys))  # block dims left unindexed stay before the partition dim
        total_kept = kept + (self.ndim - len(keys))
        if on_chip and total_kept < 2 and int_free:
            last = int_free[-1]  # keep the last integer-indexed free dim as size 1 so the tile stays 2-D
            i = norm[last]
            norm[last] = slice(i, i + 1)
        nkey = tuple(norm)
        if overrun is not None:
            return self._overrun_view(nkey, new_par if on_chip else 0, overrun)
        view = self.arr[nkey]
        return View(self.storage, view, self.steps + (nkey,), None, new_par if on_chip else 0)

    def _overrun_view(self, nkey: tuple[Any, ...], par_axis: int, error: NkiError) -> "View":
        """A classic slice that runs past the tensor as coordinates: legal where the instruction's mask turns
        the outside elements off (nki-samples ``vision.py`` tiles a ragged dim with ``[t*128:(t+1)*128]`` and
        ``mask=(row < n)``); an unmasked access to them raises at the instruction (``_checked_coords``)."""
        if any(k is None for k in nkey):
            raise error
        keys = nkey + tuple(slice(0, n, 1) for n in self.arr.shape[len(nkey):])
        rank = sum(1 for k in keys if isinstance(k, slice))
        coords: list[np.ndarray] = []
        axis = 0
        for k in keys:
            if isinstance(k, slice):
                r = np.arange(k.start, k.stop, k.step)
                coords.append(r.reshape((1,) * axis + (r.size,) + (1,) * (rank - axis - 1)))
                axis += 1
            else:
                coords.append(np.full((1,) * rank, int(k)))
        return View(self.storage, self.arr, self.steps, tuple(coords), par_axis)

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
                               created_here(self.storage))
            return slice(s, max(e, s), step)
        return slice(start, stop, step)

    def _index_advanced(self, keys: tuple[Any, ...], sim: runtime.Simulation | None) -> "View":
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
            return View(self.storage, self.arr[basic], self.steps + (basic,), None, 0)
        return View(self.storage, self.arr, self.steps, tuple(arrays), 0)

    def _index_advanced_view(self, keys: tuple[Any, ...]) -> "View":
        assert self.coords is not None
        k2 = tuple(k.values if isinstance(k, Index) else k for k in keys)
        coords = tuple(np.asarray(np.broadcast_to(c, self.shape)[k2]) for c in self.coords)
        return View(self.storage, self.arr, self.steps, coords, 0)

    # -- writing ------------------------------------------------------------------------------
    def assign(self, value: Any) -> None:
        """``dst[...] = src``: copy with free-dim broadcast from src; dst must not be smaller.

        A masked classic instruction's result writes only its predicated elements (``predicate_of``).
        """
        src = value.read() if isinstance(value, View) else np.asarray(value)
        if isinstance(value, View) and value.buffer.is_hbm and self.buffer.is_on_chip:
            raise NkiError("err_unsupported_memory",
                           f"cannot assign HBM tensor `{value.name}` to on-chip tensor `{self.name}`; use nl.load",
                           caller_location())
        self.write(src, predicate_of(value), reduction=isinstance(value, View) and is_reduction(value.storage))

    def write(self, values: Any, mask: Any = None, accumulate: bool = False, reduction: bool = False) -> None:
        """Store values into this view (cast to its dtype), honouring mask and all write checks.

        ``accumulate`` (``+=``) and ``reduction`` (an ``nl.loop_reduce`` result) are the accumulations the docs
        allow across ``affine_range`` iterations: exempt from the output-dependency check."""
        sim = runtime.current()
        st = self.storage
        if sim is not None:
            if st.interval is not None:
                st.interval.last = sim.instructions
            if sim.tracer is not None:
                sim.tracer.note(self, True)
        if st.unpoisoned and (accumulate or not (mask is None and self.coords is None and self.arr.size == st.array.size)):
            poison(st)  # a partial first write: the rest must read as fresh (poisoned) memory
        if st.immutable:
            # SDK >= 2.21 compilers reject this: an error at the store for a kernel that returns its outputs
            # (the 2.21+ convention); the older output-parameter convention (the SDK's simulation-mode API
            # examples) returns nothing and writes its outputs through parameters: reported once, carried on
            st.immutable = False
            if sim is not None and sim.strict_params:
                raise NkiError("err_cannot_update_immutable_parameter",
                               f"Cannot update immutable parameter `{st.name}`: kernel parameters are immutable "
                               "unless annotated nt.mutable_tensor (and returned); write into a new shared_hbm "
                               "output instead", caller_location(), created_here(st))
            if sim is not None:
                sim.warnings.append(NkiError(
                    "err_cannot_update_immutable_parameter",
                    f"Cannot update immutable parameter `{st.name}`: kernel inputs are read-only unless annotated "
                    "nt.mutable_tensor (neuronx-cc >= 2.21 rejects this); write into a new shared_hbm output instead",
                    caller_location(), created_here(st), severity="warning"))
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
        if sim is not None and sim.affine and not accumulate and not reduction:
            self._check_affine(sim, mvals)
        if (sim is not None and not accumulate and sim.generation == runtime.NEW and st.buffer.is_hbm
                and (st.buffer.shared or st.is_param) and math.prod(sim.grid) > 1):
            mvals = self._spmd_order(sim, mvals)
        fresh = self._psum_fresh(sim, mvals) if sim is not None and st.buffer.kind == "psum" else None
        if self.coords is None:
            target = self.arr
            if accumulate:
                base = dtypes.to_fp32(target) if fresh is None else np.where(fresh, 0, dtypes.to_fp32(target))
                upd = dtypes.cast(base + dtypes.to_fp32(vals), target.dtype)
            else:
                upd = dtypes.cast(vals, target.dtype)
            if mvals is None:
                target[...] = upd
            else:
                target[mvals] = np.broadcast_to(upd, shape)[mvals]
            written: tuple[np.ndarray, ...] | None = None
        else:
            coords = self._checked_coords(mvals)
            if mvals is not None:
                coords = tuple(np.broadcast_to(c, shape)[mvals] for c in coords)
                vals = vals[mvals]
            cur = self.arr[coords]
            if accumulate:
                base = dtypes.to_fp32(cur)
                if fresh is not None:
                    base = np.where(fresh if mvals is None else fresh[mvals], 0, base)
                upd = dtypes.cast(base + dtypes.to_fp32(vals), self.arr.dtype)
            else:
                upd = dtypes.cast(vals, self.arr.dtype)
            self.arr[coords] = upd
            written = coords
        if sim is not None and st.buffer.is_hbm:  # which line wrote which box (first-mismatch lines)
            sim.stores.note(self, written, mvals if written is None else None, sim.kernel_file)
        st.written = True
        st.unpoisoned = False
        st.predicate = None  # written again: no longer just the result of one masked instruction
        if st.is_param:
            st.mutated = True

    def _spmd_order(self, sim: runtime.Simulation, mvals: np.ndarray | None) -> np.ndarray | None:
        """The elements this write of a shared HBM tensor lands on when the launch's programs run in lockstep.

        The simulator runs the LNC programs of a new-API launch one after another; on hardware each runs on
        its own physical core at the same time (classic grids on one NeuronCore do run serially). An
        element keeps the value of the write made at the latest step of its program (ties: the later program),
        so a zero-fill every program does before writing its own shard (nki-library ``cascaded_max_utils``)
        cannot erase a shard another program wrote at a later step. Reads see the sequential state."""
        st = self.storage
        stamps = sim.hbm_stamps.get(st)
        if stamps is None:
            stamps = (np.full(st.array.shape, -1, dtype=np.int32), np.zeros(st.array.shape, dtype=np.int32))
            sim.hbm_stamps[st] = stamps
        me, now = sim.program_index, sim.instructions - sim.program_start
        owner, when = (replay(a, self.steps) for a in stamps)
        if self.coords is None:
            if owner.shape != self.shape:
                return mvals  # a view the side arrays cannot follow: program order
            o, w = owner, when
            coords: tuple[np.ndarray, ...] = ()
        else:
            coords = tuple(np.broadcast_to(c, self.shape) for c in self._checked_coords(mvals))
            o, w = owner[coords], when[coords]
        keep = ~((o >= 0) & (o != me) & (w > now))
        if mvals is not None:
            keep &= mvals
        if self.coords is None:
            o[keep] = me
            w[keep] = now
        else:
            idx = tuple(c[keep] for c in coords)
            owner[idx] = me
            when[idx] = now
        if mvals is None and keep.all():
            return None
        return keep

    def _psum_fresh(self, sim: runtime.Simulation, mvals: np.ndarray | None) -> np.ndarray:
        """Where this PSUM view was never written (view-shaped), noting the elements this write covers.

        On hardware ``psum += x`` (the classic accumulation idiom) is the first write of an accumulation
        group where nothing was written before: it starts from zero, not from stale memory (the samples'
        ``allocated_fused_linear`` / ``allocated_attention`` accumulate into a fresh ``nl.ndarray``)."""
        st = self.storage
        seen = sim.psum_written.get(st)
        if seen is None:
            seen = np.full(st.array.shape, st.written, dtype=bool)  # written = created with a fill value
            sim.psum_written[st] = seen
        region = replay(seen, self.steps)
        if self.coords is None:
            before = np.array(region, dtype=bool)
            region[...] = True if mvals is None else before | mvals
        else:  # coordinates a mask turns off may lie outside the tensor (_overrun_view): only mark the rest
            coords = tuple(np.broadcast_to(c, self.shape) for c in self._checked_coords(mvals))
            before = region[coords]
            region[coords if mvals is None else tuple(c[mvals] for c in coords)] = True
        return ~before

    def _check_affine(self, sim: runtime.Simulation, mvals: np.ndarray | None) -> None:
        st = self.storage
        for frame in sim.affine:
            if id(frame) in st.affine_ids:
                continue
            owners = frame.owners.get(id(st))
            if owners is None:  # 0 = not written in this loop, k + 1 = last written by iteration k
                owners = np.zeros(st.array.shape, dtype=np.int32)
                frame.owners[id(st)] = owners
            region = replay(owners, self.steps)
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
                if clash.any() and mvals is None and proven_overlap(owners, cur):
                    # the destination does not move with the loop variable: an earlier iteration wrote exactly
                    # these elements, unmasked (the compiler's "missing indices in the dst access")
                    prev = int(cur.flat[0]) - 1
                    raise NkiError(
                        "err_unexpected_output_dependencies",
                        f"Unexpected output dependencies, different iterations of {frame.var_name} loop (iterations "
                        f"{prev} and {frame.iteration}) write to `{st.name}`: the destination does not depend on the "
                        "loop variable; index it with the loop variable, accumulate with +=, or use "
                        "nl.sequential_range", caller_location(), created_here(st))
                if clash.any() and not frame.reported:
                    # partial overlaps are reported, not raised: compilers do not always prove them, and published
                    # kernels that ran on hardware contain such writes; the simulation continues in program order
                    frame.reported = True
                    prev = int(cur[clash].flat[0]) - 1
                    sim.warnings.append(NkiError(
                        "err_unexpected_output_dependencies",
                        f"Unexpected output dependencies, different iterations of {frame.var_name} loop (iterations "
                        f"{prev} and {frame.iteration}) write to `{st.name}`: on hardware iterations may run in any "
                        "order; index the destination with the loop variable or use nl.sequential_range",
                        caller_location(), created_here(st), severity="warning"))
            if self.coords is not None:
                region[coords] = mark
            elif mvals is None:
                region[...] = mark
            else:
                region[mvals] = mark

    def _derive(self, view: np.ndarray, step: Any, par_axis: int = 0) -> "View":
        """A new view of the same storage, one step further down the chain."""
        if self.coords is not None:
            raise NkiError("sim_invalid_argument", f"cannot take a view of an nl.arange-indexed access of "
                           f"`{self.name}`", caller_location())
        return View(self.storage, view, self.steps + (step,), None, par_axis)


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


def _full_range(k: slice, n: int) -> slice:
    """The explicit ``start:stop:step`` a slice asks for, not clipped to the ``n`` elements there are."""
    step = 1 if k.step is None else _as_int(k.step)
    if step < 0:
        return slice(*k.indices(n))
    s = 0 if k.start is None else _as_int(k.start)
    e = n if k.stop is None else _as_int(k.stop)
    return slice(s + n if s < 0 else s, e + n if e < 0 else e, step)


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
    if isinstance(k, View):
        raise NkiError("err_dynamic_control_flow_not_supported",
                       f"tensor `{k.name}` holds runtime values and cannot be used as a static index",
                       caller_location())
    try:
        return int(k.__index__())
    except Exception:
        raise NkiError("sim_invalid_argument", f"unsupported index {k!r}", caller_location()) from None


def _dynamic_index(k: Any) -> Any:
    """A tensor used as an index (classic indirect DMA) becomes its integer values."""
    if isinstance(k, View):
        vals = k.read()
        if not dtypes.is_int(vals.dtype) and not np.all(np.isfinite(vals)):
            raise NkiError("err_tensor_access_out_of_bound",
                           f"indirect index tensor `{k.name}` holds non-finite values", caller_location())
        return np.asarray(vals).astype(np.int64)
    return k


def mask_values(mask: Any) -> np.ndarray:
    if isinstance(mask, Mask):
        return mask.values
    if isinstance(mask, View):
        return mask.read().astype(bool)
    return np.asarray(mask, dtype=bool)
