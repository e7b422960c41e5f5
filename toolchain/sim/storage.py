"""Memory of the simulated NeuronCore: one ``Storage`` per allocation, and the allocation checks.

A ``Storage`` holds the NumPy array of one HBM, SBUF or PSUM allocation in its real dtype (fresh
on-chip memory is poisoned lazily: NaN / 4, so reads of unwritten data show) plus the facts the
checks need (written, immutable, liveness interval, masked-instruction predicate). Only the
simulator's own modules see storages: kernel code holds ``tensor.Tensor`` handles.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from typing import Any

import numpy as np

from nki_agent.toolchain.facts import dtypes
from nki_agent.toolchain.facts.errors import NkiError, Related, SourceLocation
from ..location import caller_location
from . import runtime
from .buffers import Buffer, as_buffer
from .index import Index


class Storage:
    """One allocation: the backing array plus facts the checks need."""

    __slots__ = ("array", "buffer", "name", "site", "written", "immutable", "is_param", "mutated", "par_axis",
                 "affine_ids", "interval", "unpoisoned", "predicate", "serial", "__weakref__")

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
        self.serial = sim.new_serial() if sim else 0  # identity within the launch (the trace's storage ids)

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


def new_storage(shape: Any, dtype: Any, buffer: Any = None, name: str = "", fill: Any = None,
                par_axis: int | None = None, initial: np.ndarray | None = None) -> Storage:
    """Allocate one tensor's memory; on-chip memory without ``fill`` is poisoned. Checks partition limits.

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
    shown = name or assigned_name(site)  # the user's variable in messages, not 'tensor'
    if buf.is_on_chip:
        if len(shp) < 2:
            raise NkiError("sim_invalid_argument",
                           f"Insufficient rank: on-chip tensor '{shown}' of shape {list(shp)} must be "
                           "at least 2-D (partition dim first), e.g. (128, 1)", site)
        if shp[p_axis] > sim.target.pmax:
            raise NkiError("err_num_partition_exceed_arch_limit",
                           f"number of partitions {shp[p_axis]} of tensor '{shown}' {list(shp)} exceed "
                           f"architecture limitation of {sim.target.pmax}.", site)
        if fill is not None and sim.generation == runtime.CLASSIC and buf.params and buf.params[0] == "mod_alloc":
            raise NkiError("err_tensor_creation_on_scratchpad_with_init_value_not_supported",
                           "Creating SBUF/PSUM tensor with init value is not supported in allocated NKI kernels.", site)
        if buf.kind == "psum" and sim.generation == runtime.CLASSIC:
            free_bytes = int(np.prod(shp[p_axis + 1:], dtype=np.int64)) * dt.itemsize
            if free_bytes > sim.target.psum_bank_bytes:
                raise NkiError("sim_psum_bank_overflow",
                               f"PSUM tile '{shown}' {list(shp)} needs {free_bytes} bytes per partition; a "
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
            return existing  # type: ignore[no-any-return]
        st = Storage(arr, buf, shown, site, p_axis)
        sim.shared[key + (n,)] = st
    else:
        st = Storage(arr, buf, shown, site, p_axis)
    if fill is not None or initial is not None:
        st.written = True
    else:
        st.unpoisoned = True
    if buf.is_on_chip:
        # one block of a block-dim tensor must fit; blocks are allocated as separate tiles (rotated/spilled)
        free_bytes = int(np.prod(shp[p_axis + 1:], dtype=np.int64)) * dt.itemsize
        st.interval = sim.memory.allocate(st, buf.kind, free_bytes, sim.instructions)
    sim.record(site, name or "", shp, dtypes.name(dt), buf.label)
    return st


def assigned_name(site: SourceLocation | None) -> str:
    """The name a new tensor is assigned to (``acc = nl.zeros(...)`` → "acc"), for messages when the
    kernel gave no ``name=``; "tensor" when the allocation is not a plain assignment to one name."""
    if site is None:
        return "tensor"
    return _assigned_name(site.path, site.line, site.column)


@lru_cache(maxsize=4096)
def _assigned_name(path: str, line: int, column: int) -> str:
    from ..location import ast_context

    for node in ast_context(SourceLocation(path, line, column))[:4]:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            return node.targets[0].id
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            return node.target.id
        if isinstance(node, (ast.stmt,)):
            break
    return "tensor"


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


def poison(st: Storage) -> None:
    st.array.fill(dtypes.poison(st.array.dtype))
    st.unpoisoned = False


def created_here(st: Storage) -> tuple[Related, ...]:
    if st.site is None:
        return ()
    return (Related(st.site, f"`{st.name}` {list(st.shape)} in {st.buffer.label} created here"),)
