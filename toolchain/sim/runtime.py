"""The state of one kernel simulation: target, API generation, SPMD ids, memory, loops, trace.

A ``Simulation`` is active (``current()``) only while a kernel body runs. Everything the checks need
across calls lives here: live on-chip bytes, the active ``affine_range`` frames that detect
conflicting writes between iterations, the shared-HBM registry that makes SPMD instances share their
outputs, a cooperative deadline, the per-line trace of observed tile shapes, and the store log of
HBM writes (``stores.py``: which line wrote the first mismatching output element).
"""

from __future__ import annotations

import contextvars
import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from nki_agent.toolchain.facts.errors import NkiError, Related, SourceLocation
from ..location import caller_location
from nki_agent.toolchain.facts.targets import Target, get_target
from . import memory_model
from .stores import StoreLog

if TYPE_CHECKING:
    from .tensor import Storage
    from .trace import Tracer

CLASSIC = "classic"  # neuronxcc.nki (SDK <= 2.26 semantics)
NEW = "new"  # nki 0.3-0.6


@dataclass
class AffineFrame:
    """One running ``affine_range`` loop: whose iteration wrote which element of outer tensors."""

    depth: int
    var_name: str
    iteration: int = 0
    owners: dict[int, np.ndarray] = field(default_factory=dict)
    reported: bool = False  # one conflict report per loop is enough


@dataclass
class TraceEntry:
    """An observed tensor at a source line (shape, dtype, buffer) for hovers and reports."""

    line: int
    column: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    buffer: str


@dataclass
class Simulation:
    """Mutable state of one kernel launch (all SPMD instances)."""

    target: Target
    generation: str
    kernel_code: Any = None  # code object of the top-level kernel function
    kernel_file: str = ""
    grid: tuple[int, ...] = ()
    program_ids: tuple[int, ...] = ()
    deadline: float = float("inf")
    time_limit: float | None = None  # seconds the launch may run (the deadline's source; named in the error)
    memory: Any = None  # memory_model.MemoryModel, created with the simulation
    affine: list[AffineFrame] = field(default_factory=list)
    loop_depth: int = 0
    shared: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    shared_seen: dict[tuple[Any, ...], int] = field(default_factory=dict)
    # PSUM elements some instruction wrote: a ``+=`` into the others starts from zero (docs/toolchain.md)
    psum_written: "weakref.WeakKeyDictionary[Any, np.ndarray]" = field(default_factory=weakref.WeakKeyDictionary)
    # SPMD programs run one after another but are ordered as if in lockstep (docs/toolchain.md, "SPMD programs"):
    # which program last wrote each element of a shared HBM tensor, and at which step of that program
    hbm_stamps: "weakref.WeakKeyDictionary[Any, tuple[np.ndarray, np.ndarray]]" = field(
        default_factory=weakref.WeakKeyDictionary)
    program_index: int = 0  # the running program's position in instances_of(grid)
    program_start: int = 0  # ``instructions`` when it started: its step = instructions - program_start
    trace: list[TraceEntry] = field(default_factory=list)
    warnings: list[Any] = field(default_factory=list)
    instructions: int = 0
    psum_open: "weakref.WeakKeyDictionary[Any, np.ndarray]" = field(default_factory=weakref.WeakKeyDictionary)  # PSUM elements inside an open matmul accumulation group
    trace_limit: int = 20000  # bound the trace so huge unrolled kernels cannot exhaust memory
    stores: StoreLog = field(default_factory=StoreLog)  # which line last wrote which box of each HBM tensor
    tracer: "Tracer | None" = None  # the instruction trace for the cost model (trace.py); None = not tracing
    arithmetic: bool = True  # False: a trace-only run, the expensive ops skip computing values
    serials: int = 0  # storages created so far (Storage.serial)
    strict_params: bool = False  # a store into an immutable parameter is an error, not a warning (compile_checks)

    def new_serial(self) -> int:
        self.serials += 1
        return self.serials

    # -- time ---------------------------------------------------------------------------------
    def tick(self) -> None:
        """Called by every op and loop step; advances the clock and enforces the cooperative deadline."""
        self.instructions += 1
        if self.instructions & 0x3F == 0 and time.monotonic() > self.deadline:
            limit = f" of {self.time_limit:g} s" if self.time_limit else ""
            raise NkiError("sim_timeout", f"kernel exceeded the simulation time limit{limit}", caller_location())

    # -- trace --------------------------------------------------------------------------------
    def record(self, loc: SourceLocation | None, name: str, shape: tuple[int, ...], dtype: str, buffer: str) -> None:
        if loc is None or len(self.trace) >= self.trace_limit or loc.path != self.kernel_file:
            return
        self.trace.append(TraceEntry(loc.line, loc.column, name, tuple(shape), dtype, buffer))


_CURRENT: contextvars.ContextVar[Simulation | None] = contextvars.ContextVar("nki_simulation", default=None)


def current() -> Simulation | None:
    return _CURRENT.get()


def require(api: str = "NKI API") -> Simulation:
    sim = _CURRENT.get()
    if sim is None:
        raise NkiError("err_nki_api_outside_of_nki_kernel",
                       f"'{api}' can only be called inside a function decorated with nki.jit",
                       caller_location())
    return sim


class activate:
    """Context manager that makes a Simulation current for the duration of a kernel launch."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.token: contextvars.Token[Simulation | None] | None = None

    def __enter__(self) -> Simulation:
        self.token = _CURRENT.set(self.sim)
        return self.sim

    def __exit__(self, *exc: object) -> None:
        assert self.token is not None
        _CURRENT.reset(self.token)


def new_simulation(target: str | Target | None, generation: str, time_limit: float | None = None) -> Simulation:
    tgt = target if isinstance(target, Target) else get_target(target)
    deadline = time.monotonic() + time_limit if time_limit else float("inf")
    sim = Simulation(target=tgt, generation=generation, deadline=deadline, time_limit=time_limit or None)
    sim.memory = memory_model.MemoryModel(tgt.pmax, tgt.sbuf_bytes_per_partition, tgt.psum_bytes_per_partition)
    return sim


def affine_loop(n_iter_values: Iterator[int], var_name: str = "i", line: int = 0) -> Iterator[int]:
    """Iterate an ``affine_range``: classic kernels get write-conflict tracking per iteration."""
    sim = current()
    if sim is None or sim.generation != CLASSIC:
        yield from plain_loop(n_iter_values, "affine", var_name, line)
        return
    sim.loop_depth += 1
    frame = AffineFrame(depth=sim.loop_depth, var_name=var_name)
    sim.affine.append(frame)
    tr = sim.tracer
    if tr is not None:
        tr.loop_enter("affine", line, var_name)
    try:
        for k, v in enumerate(n_iter_values):
            frame.iteration = k
            sim.tick()
            if tr is not None:
                tr.loop_iter()
            yield v
    finally:
        sim.affine.remove(frame)
        sim.loop_depth -= 1
        if tr is not None:
            tr.loop_exit()


def plain_loop(values: Iterator[int], kind: str = "sequential", var_name: str = "i", line: int = 0) -> Iterator[int]:
    """Iterate a sequential/static/plain range: tracks loop depth, the deadline and the trace's loop nest."""
    sim = current()
    if sim is None:
        yield from values
        return
    sim.loop_depth += 1
    tr = sim.tracer
    if tr is not None:
        tr.loop_enter(kind, line, var_name)
    try:
        for v in values:
            sim.tick()
            if tr is not None:
                tr.loop_iter()
            yield v
    finally:
        sim.loop_depth -= 1
        if tr is not None:
            tr.loop_exit()
