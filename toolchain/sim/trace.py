"""The instruction trace of one launch: every NKI instruction the simulator executes, for the cost model.

A ``Tracer`` lives on the running ``Simulation`` (``Simulation.tracer``; ``None`` = not tracing). The
namespaces (``language.py`` / ``isa_api.py``) open an instruction around every API call the kernel makes
(``begin`` / ``end``; calls the simulator makes internally are inside it and do not count), and so do
the tile operators (``a + b``), assignments (``t[...] = x``) and accumulations (``acc += x``) of
``tensor.py``. While an instruction is open, every ``View.read`` / ``View.write`` notes an ``Access``:
which storage (a serial number, never reused within the launch), which buffer, the shape and dtype
of the view, the bytes moved, a conservative byte range of the storage (for data dependencies) and
the innermost contiguous run (the DMA descriptor's row size). Loops note their identity (the ``for``
line and the enclosing loop), kind (``affine`` / ``sequential`` / ``static`` / ``range``) and
iteration, so every instruction carries its loop nest.

Fusion: ``t[...] = nl.load(...)`` or ``acc += nisa.nc_matmul(...)`` is one instruction on hardware
(the compiler writes the result straight into the destination), so an assignment whose only read is
the whole result the previous instruction just wrote adds its writes to that instruction instead of
becoming a copy — except when the producer is TensorE and the destination is not PSUM (a real copy).

The trace holds plain data only (no views or arrays), so tracing never keeps tiles alive. It stops
recording at ``limit`` instructions and says so (``truncated``); the cost model reports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .view import View

DEFAULT_LIMIT = 2_000_000  # instructions per launch (the matmul tutorial's Original version: ~100k)

LOOP_KINDS = ("affine", "sequential", "static", "range")
_DTYPE_NAMES: dict[Any, str] = {}


@dataclass(slots=True)
class Access:
    """One operand of an instruction: a view of a storage read or written."""

    storage: int  # serial of the storage within the launch (never reused)
    buffer: str  # "hbm" | "sbuf" | "psum"
    shape: tuple[int, ...]  # shape of the accessed view (after indexing)
    dtype: str  # NKI dtype name ("bfloat16", "float32", ...)
    nbytes: int  # bytes moved: elements accessed x itemsize
    partitions: int  # size of the view's partition axis (on-chip) or of its first axis (HBM)
    lo: int  # byte range [lo, hi) of the storage this access may touch (conservative: for dependencies)
    hi: int
    run: int  # bytes of the innermost contiguous run (a DMA descriptor row); nbytes when fully contiguous
    par_axis: int = 0  # axis of ``shape`` that is the partition axis (``par_dim``; 0 without block axes / on HBM)

    @property
    def free_elements(self) -> int:
        """Elements per partition (``N`` of the cost formulas): every axis but the partition axis, so block
        axes in front of a ``par_dim`` count as free (the allocator lays them out along the free axis)."""
        n = 1
        for d, s in enumerate(self.shape):
            if d != self.par_axis:
                n *= s
        return n


@dataclass(slots=True)
class Instr:
    """One executed NKI instruction."""

    index: int
    api: str  # "nl.load", "nisa.nc_matmul", "op.add" (a tile operator), "assign" (t[...] = x), "accumulate" (+=)
    line: int  # kernel source line (0: not in the kernel file)
    loops: tuple[tuple[int, int], ...]  # (loop id, iteration) per enclosing loop, outermost first
    instance: int  # SPMD instance, row-major over the grid
    reads: list[Access] = field(default_factory=list)
    writes: list[Access] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)  # cost-relevant arguments: engine, op, accumulate, ...


@dataclass(slots=True)
class Loop:
    """One loop of the kernel (the same ``for`` statement under the same parent is one loop)."""

    id: int
    line: int
    var: str
    kind: str  # one of LOOP_KINDS
    parent: int | None
    trips: int = 0  # most iterations seen in one execution of the loop
    entered: int = 0  # how many times the loop was started


@dataclass
class Trace:
    """The instruction trace of one launch (all SPMD instances)."""

    instrs: list[Instr] = field(default_factory=list)
    loops: dict[int, Loop] = field(default_factory=dict)
    target: str = ""
    generation: str = ""
    grid: tuple[int, ...] = ()
    kernel_file: str = ""
    truncated: bool = False
    limit: int = DEFAULT_LIMIT
    arithmetic: bool = True  # False: values were not computed (a trace-only run)


class Tracer:
    """Builds the ``Trace`` of one launch from the simulator's hooks."""

    __slots__ = ("trace", "depth", "api", "attrs", "line", "reads", "writes", "stack", "instance", "_loop_ids",
                 "_bases")

    def __init__(self, limit: int = DEFAULT_LIMIT, arithmetic: bool = True) -> None:
        self.trace = Trace(limit=limit, arithmetic=arithmetic)
        self.depth = 0
        self.api = ""
        self.attrs: dict[str, Any] = {}
        self.line = 0
        self.reads: list[Access] = []
        self.writes: list[Access] = []
        self.stack: list[list[int]] = []  # [loop id, iteration]
        self.instance = 0
        self._loop_ids: dict[tuple[int | None, int, str], int] = {}
        self._bases: dict[int, int] = {}  # storage serial -> address of its array

    # -- storages -----------------------------------------------------------------------------------
    def _base(self, serial: int, array: Any) -> int:
        """Address of a storage's array (looked up once per storage: NumPy builds the interface dict)."""
        base = self._bases.get(serial)
        if base is None:
            base = self._bases[serial] = array.__array_interface__["data"][0]
        return base

    # -- instructions -------------------------------------------------------------------------------
    def begin(self, api: str, line: int, attrs: dict[str, Any] | None = None) -> None:
        self.depth += 1
        if self.depth == 1:
            self.api = api
            self.line = line
            self.attrs = attrs if attrs is not None else {}
            self.reads = []
            self.writes = []

    def end(self) -> None:
        self.depth -= 1
        if self.depth:
            return
        if not (self.reads or self.writes):
            return
        tr = self.trace
        if len(tr.instrs) >= tr.limit:
            tr.truncated = True
            return
        if self.api in ("assign", "accumulate") and self._fuse():
            return
        tr.instrs.append(Instr(len(tr.instrs), self.api, self.line, tuple((a, b) for a, b in self.stack),
                               self.instance, self.reads, self.writes, self.attrs))

    def abort(self) -> None:
        """An instruction that raised: nothing is recorded (the launch is failing)."""
        self.depth = max(self.depth - 1, 0)

    def _fuse(self) -> bool:
        instrs = self.trace.instrs
        if not instrs or len(self.reads) != 1:
            return False
        prev = instrs[-1]
        src = self.reads[0]
        if not any(w.storage == src.storage and w.lo <= src.lo and src.hi <= w.hi for w in prev.writes):
            return False
        if prev.api.endswith(("nc_matmul", "matmul", "nc_transpose", "transpose")) and any(
                w.buffer != "psum" for w in self.writes):
            return False
        prev.writes.extend(self.writes)
        if self.api == "accumulate":
            prev.attrs["accumulate"] = True
        return True

    def note(self, view: View, write: bool) -> None:
        """An access of ``view`` by the open instruction (ignored outside one: launch-time conversions)."""
        if not self.depth:
            return
        st = view.storage
        arr = view.arr
        item = arr.itemsize
        full = st.array
        if view.coords is None and (arr is full or arr.size == full.size):  # the whole storage: no address maths
            lo, hi = 0, full.nbytes
            shape = tuple(arr.shape)
            size = arr.size
            run = size * item if arr.flags.c_contiguous else _run(arr, item)
        elif view.coords is None and arr.size:
            start = arr.__array_interface__["data"][0] - self._base(st.serial, full)
            lo = hi = start
            for n, s in zip(arr.shape, arr.strides):
                if s >= 0:
                    hi += (n - 1) * s
                else:
                    lo += (n - 1) * s
            hi += item
            run = _run(arr, item)
            shape = tuple(arr.shape)
            size = arr.size
        else:  # nl.arange coordinates (a permuted or gathered access): bounded by their extremes
            shape = view.shape
            size = 1
            for n in shape:
                size *= n
            lo, hi, run = self._coords_extent(view, full, item)
        nbytes = size * item
        kind = st.buffer.kind
        dt = arr.dtype
        dname = _DTYPE_NAMES.get(dt)
        if dname is None:
            dname = _DTYPE_NAMES[dt] = str(dt.name)  # NumPy builds dtype names in Python: cache them
        pa = view.par_axis if kind != "hbm" and 0 < view.par_axis < len(shape) else 0
        acc = Access(st.serial, kind, shape, dname, nbytes, shape[pa] if shape else 1, lo, hi,
                     min(run, nbytes) if nbytes else 0, pa)
        (self.writes if write else self.reads).append(acc)

    def _coords_extent(self, view: View, full: Any, item: int) -> tuple[int, int, int]:
        """Byte range and innermost contiguous run of an access by index arrays (``nl.arange`` grids that
        are not plain slices, e.g. a transposing ``out[i_q, i_d]`` store): the range spans the extreme
        coordinates; the run is contiguous only when the access's last axis walks the storage's innermost
        axis with unit step."""
        arr = view.arr
        coords = view.coords
        assert coords is not None
        if not arr.size or not coords:
            return 0, full.nbytes, item
        lo = hi = arr.__array_interface__["data"][0] - self._base(view.storage.serial, full)
        affine = _affine_strides(coords, view.shape, arr.strides)
        if affine is not None:  # a dense grid (nl.arange / nl.mgrid, any broadcast): priced like its slice
            offset, strides = affine
            lo = hi = lo + offset
            for n, s in zip(view.shape, strides):
                if s >= 0:
                    hi += (n - 1) * s
                else:
                    lo += (n - 1) * s
            return max(lo, 0), min(hi + item, full.nbytes), _run_of(view.shape, strides, item)
        last = len(view.shape) - 1
        run = item
        for d, (c, stride) in enumerate(zip(coords, arr.strides)):
            if not c.size:
                continue
            cmin, cmax = int(c.min()), int(c.max())
            if stride >= 0:
                lo += cmin * stride
                hi += cmax * stride
            else:
                lo += cmax * stride
                hi += cmin * stride
            if d == len(coords) - 1 and stride == item and c.ndim == len(view.shape) and last >= 0 and \
                    c.shape[last] > 1 and c.size == c.shape[last]:
                flat = c.reshape(-1)
                if int(flat[1]) - int(flat[0]) == 1 and cmax - cmin + 1 == flat.size:
                    run = flat.size * item  # the last axis walks the innermost storage axis contiguously
        return max(lo, 0), min(hi + item, full.nbytes), run

    # -- loops --------------------------------------------------------------------------------------
    def loop_enter(self, kind: str, line: int, var: str) -> int:
        parent = self.stack[-1][0] if self.stack else None
        key = (parent, line, var)
        lid = self._loop_ids.get(key)
        loops = self.trace.loops
        if lid is None:
            lid = self._loop_ids[key] = len(loops) + 1
            loops[lid] = Loop(lid, line, var, kind, parent)
        loops[lid].entered += 1
        self.stack.append([lid, -1])
        return lid

    def loop_iter(self) -> None:
        top = self.stack[-1]
        top[1] += 1
        loop = self.trace.loops[top[0]]
        if top[1] + 1 > loop.trips:
            loop.trips = top[1] + 1

    def loop_exit(self) -> None:
        if self.stack:
            self.stack.pop()


def _run(arr: Any, item: int) -> int:
    """Bytes of the innermost contiguous run of a NumPy view."""
    return _run_of(arr.shape, arr.strides, item)


def _run_of(shape: Any, strides: Any, item: int) -> int:
    """Bytes of the innermost contiguous run of an access of ``shape`` with byte ``strides`` per axis."""
    run = item
    for n, s in zip(reversed(tuple(shape)), reversed(tuple(strides))):
        if n == 1:
            continue
        if s != run:
            break
        run *= n
    return run


def _affine_strides(coords: Any, shape: tuple[int, ...], strides: Any) -> tuple[int, tuple[int, ...]] | None:
    """The canonical form of an access by index arrays: (byte offset of its first element, byte stride per
    axis of the access) when every coordinate is an affine function of the access's axes (``nl.arange``
    grids, full ``nl.mgrid`` grids, ``start + stride * i`` ...), None for a gather. So ``a[i_p, i_f]`` from
    ``nl.mgrid`` and the slice ``a[0:P, 0:F]`` have the same strides and contiguous run (issue 24: a full
    mgrid grid used to be priced as a one-element-run, transposing DMA)."""
    rank = len(shape)
    offset = 0
    out = [0] * rank
    for c, stride in zip(coords, strides):
        c = np.asarray(c)
        if c.ndim > rank:
            return None
        if c.ndim < rank:
            c = c.reshape((1,) * (rank - c.ndim) + c.shape)
        if not c.size:
            return None
        origin = (0,) * rank
        c0 = int(c[origin])
        pred = np.full(c.shape, c0, dtype=np.int64)
        for k in range(rank):
            if c.shape[k] == 1:
                continue
            if c.shape[k] != shape[k]:
                return None
            step = int(c[origin[:k] + (1,) + origin[k + 1:]]) - c0
            if step:
                idx = np.arange(c.shape[k], dtype=np.int64).reshape((1,) * k + (-1,) + (1,) * (rank - k - 1))
                pred = pred + step * idx
            out[k] += step * int(stride)
        if not np.array_equal(pred, c):
            return None
        offset += c0 * int(stride)
    return offset, tuple(out)
