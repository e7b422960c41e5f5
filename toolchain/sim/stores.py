"""The store log of one launch: which kernel source line last wrote which box of an HBM tensor.

Every write into an HBM storage (``View.write``: ``nl.store``, ``nisa.dma_copy``, ``t[...] = ...``)
is noted on the running ``Simulation`` (``Simulation.stores``) as (storage, index box, line). The box
is the bounding box, in the storage's own coordinates, of the elements written; it is *exact* (the
write covered every element of it) for slices, integer indices, permutations, broadcasts and
rectangular masks or ``nl.arange`` grids — every store the examples make — and otherwise the entry
only says "something unknown was written here". Consecutive writes of one storage from one line into
adjacent boxes merge, so a tiled store loop usually costs one entry per output; the log is capped at
``MAX_ENTRIES`` (a storage whose later writes were dropped answers "unknown" everywhere).

At the end of a launch ``for_outputs`` keeps the entries of the returned output tensors as plain
JSON (``[output, line, [[lo, hi), ...]]``, line 0 = unknown); ``line_of`` finds the line of the last
store into one element. Display information only: no verdict depends on it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..location import caller_location

if TYPE_CHECKING:
    from .storage import Storage
    from .view import View

MAX_ENTRIES = 4096  # per launch; tiled kernels merge into a handful
Box = list[list[int]]  # per storage axis [lo, hi)


@dataclass
class StoreLog:
    """The writes into HBM storages of one launch (all SPMD instances), oldest first per storage."""

    entries: dict[int, tuple[Any, list[list[Any]]]] = field(default_factory=dict)  # id -> (storage, [[box, line, exact]])
    count: int = 0
    dropped: set[int] = field(default_factory=set)  # storages with writes past the cap

    def note(self, view: View, coords: tuple[np.ndarray, ...] | None, mask: np.ndarray | None,
             kernel_file: str) -> None:
        """Record the write of ``view`` (``coords``: the advanced coordinates written, after the mask;
        ``mask``: the mask of a basic write) at the kernel line that made it."""
        key = id(view.storage)
        if key in self.dropped:
            return
        found = _box(view, coords, mask)
        if found is None:
            return
        box, exact = found
        loc = caller_location()
        line = loc.line if loc is not None and loc.path == kernel_file else 0
        self._add(view.storage, box, line, exact and line > 0)

    def _add(self, storage: Storage, box: Box, line: int, exact: bool) -> None:
        key = id(storage)
        slot = self.entries.get(key)
        if slot is None:
            if self.count >= MAX_ENTRIES:
                self.dropped.add(key)
                return
            slot = self.entries[key] = (storage, [])  # the storage is held: its id cannot be reused
        log = slot[1]
        log.append([box, line, exact])
        self.count += 1
        while len(log) >= 2:  # the two newest entries of this storage: one box if their union is one
            (a, la, xa), (b, lb, xb) = log[-2], log[-1]
            merged = _merge(a, b) if la == lb and xa and xb else None
            if merged is None:
                break
            log[-2:] = [[merged, la, True]]
            self.count -= 1
        if self.count > MAX_ENTRIES:
            log.pop()
            self.count -= 1
            self.dropped.add(key)

    def for_outputs(self, outputs: Sequence[Storage | None]) -> list[list[Any]]:
        """The entries of the output storages (None: an output whose elements cannot be located) as JSON."""
        out: list[list[Any]] = []
        for i, st in enumerate(outputs):
            if st is None:
                continue
            slot = self.entries.get(id(st))
            for box, line, exact in slot[1] if slot is not None else ():
                out.append([i, line if exact else 0, box])
            if id(st) in self.dropped:  # later writes are unknown: a barrier over the whole tensor
                out.append([i, 0, [[0, int(n)] for n in st.array.shape]])
        return out


def line_of(entries: Any, output: int, index: Sequence[int]) -> int | None:
    """The line of the last store into ``index`` of output ``output``, if known. ``entries`` comes from a
    worker (untrusted JSON): anything malformed is skipped."""
    if not isinstance(entries, list):
        return None
    for e in reversed(entries):
        try:
            out, line, box = e
            if out != output or len(box) != len(index):
                continue
            if all(int(lo) <= int(i) < int(hi) for (lo, hi), i in zip(box, index)):
                return int(line) if isinstance(line, int) and line > 0 else None
        except (TypeError, ValueError):
            continue
    return None


def _merge(a: Box, b: Box) -> Box | None:
    """The union of two boxes when it is a box (b inside a, a inside b, or adjacent along one axis)."""
    if len(a) != len(b):
        return None
    if all(x[0] <= y[0] and y[1] <= x[1] for x, y in zip(a, b)):
        return a
    if all(y[0] <= x[0] and x[1] <= y[1] for x, y in zip(a, b)):
        return b
    differ = [d for d, (x, y) in enumerate(zip(a, b)) if x != y]
    if len(differ) != 1:
        return None
    d = differ[0]
    x, y = a[d], b[d]
    if x[1] == y[0] or y[1] == x[0]:
        return [list(v) if k != d else [min(x[0], y[0]), max(x[1], y[1])] for k, v in enumerate(a)]
    return None


def _box(view: View, coords: tuple[np.ndarray, ...] | None, mask: np.ndarray | None) -> tuple[Box, bool] | None:
    """Bounding box in storage coordinates of the elements written, and whether it is exactly them."""
    base, arr = view.storage.array, view.arr
    if base.size == 0 or arr.size == 0 or not base.flags.c_contiguous or arr.dtype.itemsize != base.dtype.itemsize:
        return None
    nd = arr.ndim
    filled = True
    if coords is not None:
        if len(coords) != nd or any(c.size == 0 for c in coords):
            return None
        lo = [int(c.min()) for c in coords]
        hi = [int(c.max()) for c in coords]
        volume = math.prod(h - lo_ + 1 for lo_, h in zip(lo, hi))
        grid = np.broadcast_arrays(*coords)
        flat = np.ravel_multi_index(tuple(g.reshape(-1) for g in grid), arr.shape)
        filled = int(np.unique(flat).size) == volume
    else:
        lo, hi = [0] * nd, [n - 1 for n in arr.shape]
        if mask is not None:
            m = np.asarray(mask, dtype=bool)
            if m.shape != arr.shape or not m.any():
                return None
            for d in range(nd):
                others = tuple(k for k in range(nd) if k != d)
                idx = np.flatnonzero(m.any(axis=others) if others else m)
                lo[d], hi[d] = int(idx[0]), int(idx[-1])
            filled = int(m.sum()) == math.prod(h - lo_ + 1 for lo_, h in zip(lo, hi))
    item = base.dtype.itemsize
    off = (arr.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // item
    strides = [s // item for s in arr.strides]
    first = off + sum(i * s for i, s in zip(lo, strides))
    if not 0 <= first < base.size:
        return None
    start = [int(x) for x in np.unravel_index(first, base.shape)]
    bstr = [math.prod(base.shape[j + 1:]) for j in range(base.ndim)]
    lo_b, hi_b = list(start), list(start)
    for d in range(nd):
        span, s = hi[d] - lo[d], strides[d]
        if span == 0 or s == 0:
            continue
        j = next((j for j in range(base.ndim) if s % bstr[j] == 0), None)
        if j is None:
            return _conservative(base, off, strides, lo, hi)
        step = s // bstr[j]
        filled = filled and abs(step) == 1
        lo_b[j] += min(0, step * span)
        hi_b[j] += max(0, step * span)
    if any(lo_b[j] < 0 or hi_b[j] >= base.shape[j] for j in range(base.ndim)):
        return _conservative(base, off, strides, lo, hi)
    return [[lo_b[j], hi_b[j] + 1] for j in range(base.ndim)], filled


def _conservative(base: np.ndarray, off: int, strides: list[int], lo: list[int],
                  hi: list[int]) -> tuple[Box, bool] | None:
    """A box that surely holds every element written (a reshaped or overlapping view): the rows of the
    flat range it spans, whole rows."""
    corners = [off + sum((h if s > 0 else lo_) * s for lo_, h, s in zip(lo, hi, strides)),
               off + sum((lo_ if s > 0 else h) * s for lo_, h, s in zip(lo, hi, strides))]
    a, b = min(corners), max(corners)
    if a < 0 or b >= base.size:
        return None
    first = [int(x) for x in np.unravel_index(a, base.shape)]
    last = [int(x) for x in np.unravel_index(b, base.shape)]
    return [[first[0], last[0] + 1]] + [[0, int(n)] for n in base.shape[1:]], False
