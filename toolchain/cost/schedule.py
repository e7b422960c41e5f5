"""The list scheduler: start and end of every instruction, engine busy time, critical path, makespan.

Two phases, so calibration can re-time a trace without re-analysing it:

* ``prepare(trace, hw)`` — constant-free facts: each instruction's lane (``engines.classify``; DMAs
  round-robin over the 16 queues in program order), its formula cycles (``instr_cost``), whether a
  matmul must reload its stationary operand, DMA shapes, and the dependency graph (``deps.build``).
* ``run(prepared, constants)`` — the timing. Instructions are taken in program order; each starts
  when its predecessors' results are ready (RAW/WAR/WAW edges, sequential-loop and SPMD-instance
  barriers) and its lane is free (in-order issue per engine, FIFO per DMA queue).
  - compute: busy = max(formula, fixed) and result ready at start + formula + fixed (+ the ~60-cycle
    SBUF access on Vector/Scalar/GpSimd): the fixed per-instruction overhead bounds how fast tiny
    instructions issue and is paid in full by an instruction that waits on its producer (nki-language.md
    §5 "Other overheads": "add ~100 cycles ... when instructions are tiny or each depends on the previous one");
  - TensorE LoadStationary: a matmul whose stationary differs from the previous one pays the LS
    cycles unless it can load in the background, i.e. the previous TensorE instruction is a matmul
    and this one was ready before TensorE became free (§5 LoadStationary row);
  - DMA: data starts ``dma_fixed_ns`` after the trigger and after the previous transfer on its
    queue; the data phase shares the core's aggregate bandwidth (``dma.BandwidthPipe``);
  - trn1 only: VectorE and GpSimd share SBUF access, VectorE and ScalarE share PSUM access (§5 "v2-only
    contention").
  The critical path walks back from the last instruction to finish through the predecessor that
  determined each start (a data producer, a barrier, the lane's previous instruction, or the transfer
  whose bandwidth use delayed a DMA).

Not modelled: cross-engine semaphore latency, DMA issue cost on the triggering engine (HWDGE ~600 ns on
v3), a bound on how far loads can run ahead (fresh tiles per iteration act as unbounded buffers; the
FIFO queues are the only limit).

Imports the trace format and the sibling modules ``hardware``, ``engines``, ``instr_cost``, ``dma``, ``deps``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..sim.trace import Trace
from . import deps as D
from . import engines as E
from .dma import BandwidthPipe, DmaShape, own_rate, units
from .hardware import SBUF_ACCESS_CYCLES, Constants, Hardware
from .instr_cost import InstrCost, cost


@dataclass
class Prepared:
    """The constant-free analysis of one trace (reusable across constants)."""

    hw: Hardware
    trace: Trace
    lanes: list[int]  # schedule lane; DMA transfers: E.DMA + queue; E.FREE: no cost
    kinds: list[str]
    cycles: list[float]  # formula cycles on the lane's engine (0 for DMA / free)
    costs: list[InstrCost]
    ls_cycles: dict[int, float]  # matmuls whose stationary is not the one already loaded
    dma: dict[int, DmaShape]
    ports: dict[int, int]  # trn1 shared access ports: bit 1 SBUF (Vector/GpSimd), bit 2 PSUM (Vector/Scalar)
    deps: D.Deps
    unknown: dict[str, int] = field(default_factory=dict)  # unmodelled APIs -> count
    folded: int = 0  # PSUM zeroings folded into matmuls

    @property
    def n(self) -> int:
        return len(self.lanes)

    @property
    def lane_count(self) -> int:
        return E.DMA + self.hw.dma_queues


@dataclass
class Schedule:
    """The timing of one run (ns from the kernel's start)."""

    start: list[float]  # DMA: start of the data phase
    end: list[float]  # result ready
    busy: list[float]  # time the instruction occupies its lane
    pred: list[int]  # the instruction that determined the start (-1: none)
    makespan: float
    lane_busy: list[float]
    lane_instrs: list[int]
    critical: list[int]  # the critical path, in program order
    critical_ns: dict[int, float]  # the part of the makespan attributed to each critical instruction


def _fold_psum_zeroing(trace: Trace, lanes: list[int], kinds: list[str]) -> int:
    """Mark PSUM zeroings whose first user is a matmul writing that PSUM as free (the compiler folds them)."""
    pending: dict[int, int] = {}
    folded = 0
    for i, ins in enumerate(trace.instrs):
        if pending:
            for a in ins.reads:
                j = pending.pop(a.storage, -1)  # read before any matmul: the zeros are real
            for a in ins.writes:
                j = pending.pop(a.storage, -1)
                if j >= 0 and kinds[i] in E.MATMUL_KINDS:
                    lanes[j], kinds[j] = E.FREE, E.K_FREE
                    folded += 1
        if E.is_psum_zeroing(ins, kinds[i]):
            for w in ins.writes:
                pending[w.storage] = i
    return folded


def prepare(trace: Trace, hw: Hardware) -> Prepared:
    """Classify, cost and link every instruction of ``trace`` (no timing)."""
    instrs = trace.instrs
    lanes: list[int] = []
    kinds: list[str] = []
    for ins in instrs:
        lane, kind = E.classify(ins)
        lanes.append(lane)
        kinds.append(kind)
    folded = _fold_psum_zeroing(trace, lanes, kinds)
    cycles: list[float] = []
    costs: list[InstrCost] = []
    ls_cycles: dict[int, float] = {}
    dma: dict[int, DmaShape] = {}
    ports: dict[int, int] = {}
    unknown: dict[str, int] = {}
    stationary: tuple[int, int, int] | None = None
    queue = 0
    for i, ins in enumerate(instrs):
        lane, kind = lanes[i], kinds[i]
        c = cost(ins, lane, kind, hw)
        costs.append(c)
        cycles.append(c.cycles)
        if kind == E.K_UNKNOWN:
            unknown[ins.api] = unknown.get(ins.api, 0) + 1
        if lane == E.DMA:
            assert c.dma is not None
            dma[i] = c.dma
            lanes[i] = E.DMA + queue
            queue = (queue + 1) % hw.dma_queues
        elif lane == E.TENSOR:
            if c.ls_cycles and c.stationary != stationary:
                ls_cycles[i] = c.ls_cycles
            if c.stationary is not None:
                stationary = c.stationary
        if hw.shared_ports and lane in (E.VECTOR, E.SCALAR, E.GPSIMD):
            bufs = {a.buffer for a in ins.reads} | {a.buffer for a in ins.writes}
            mask = (1 if lane != E.SCALAR and "sbuf" in bufs else 0) | (2 if lane != E.GPSIMD and "psum" in bufs else 0)
            if mask:
                ports[i] = mask
    dep = D.build(trace, lanes)
    return Prepared(hw, trace, lanes, kinds, cycles, costs, ls_cycles, dma, ports, dep, unknown, folded)


def run(p: Prepared, consts: Constants) -> Schedule:
    """Time a prepared trace with ``consts``."""
    hw = p.hw
    n = p.n
    nlanes = p.lane_count
    lanes, cycles, ls_cycles, dma, ports = p.lanes, p.cycles, p.ls_cycles, p.dma, p.ports
    ptr, val = p.deps.ptr, p.deps.val
    wptr, wval, mptr, mval = p.deps.wait_ptr, p.deps.wait_val, p.deps.member_ptr, p.deps.member_val
    inv_clock = [1.0 / hw.clock_ghz(lane) for lane in E.COMPUTE_LANES]
    fixed = [consts.fixed_cycles(lane) * inv_clock[lane] for lane in E.COMPUTE_LANES]
    access = [0.0] + [SBUF_ACCESS_CYCLES * inv_clock[lane] for lane in (E.VECTOR, E.SCALAR, E.GPSIMD)]
    knee, dma_fixed = consts.dma_knee_bytes, consts.dma_fixed_ns
    matmul_kinds = E.MATMUL_KINDS
    kinds = p.kinds
    start = [0.0] * n
    end = [0.0] * n
    busy = [0.0] * n
    pred = [-1] * n
    lane_free = [0.0] * nlanes
    lane_last = [-1] * nlanes
    lane_busy = [0.0] * nlanes
    lane_instrs = [0] * nlanes
    gend = [0.0] * p.deps.groups
    gidx = [-1] * p.deps.groups
    pipe = BandwidthPipe(hw.dma_aggregate_bytes_per_ns)
    port_free = [0.0, 0.0, 0.0]  # index 1: SBUF port, 2: PSUM port
    port_last = [-1, -1, -1]
    prev_tensor_mm = False
    for i in range(n):
        ready = 0.0
        who = -1
        for k in range(ptr[i], ptr[i + 1]):
            j = val[k]
            t = end[j]
            if t > ready:
                ready, who = t, j
        for k in range(wptr[i], wptr[i + 1]):
            g = wval[k]
            t = gend[g]
            if t > ready:
                ready, who = t, gidx[g]
        lane = lanes[i]
        if lane < 0:  # folded by the compiler
            s = e = ready
            occ = 0.0
        elif lane >= E.DMA:
            shape = dma[i]
            u = units(shape, knee)
            r = own_rate(shape, hw)
            s = ready + dma_fixed
            lf = lane_free[lane]
            if lf > s:
                s, who = lf, lane_last[lane]
            e, bw_pred = pipe.transfer(s, u, r, i)
            if bw_pred >= 0 and e > s + u / r * 1.000001:
                who = bw_pred
            lane_free[lane] = e
            lane_last[lane] = i
            occ = e - s
        else:
            lf = lane_free[lane]
            f = cycles[i] * inv_clock[lane]
            if lane == E.TENSOR:
                ls = ls_cycles.get(i)
                if ls is not None and not (prev_tensor_mm and ready <= lf):
                    f += ls * inv_clock[0]  # LoadStationary could not overlap a previous matmul
                prev_tensor_mm = kinds[i] in matmul_kinds
            fx = fixed[lane]
            occ = max(fx, f)
            s = ready
            if lf > s:
                s, who = lf, lane_last[lane]
            mask = ports.get(i, 0) if ports else 0
            if mask:
                for bit in (1, 2):
                    if mask & bit and port_free[bit] > s:
                        s, who = port_free[bit], port_last[bit]
                for bit in (1, 2):
                    if mask & bit:
                        port_free[bit] = s + occ
                        port_last[bit] = i
            e = s + f + fx + access[lane]
            lane_free[lane] = s + occ
            lane_last[lane] = i
        start[i] = s
        end[i] = e
        busy[i] = occ
        pred[i] = who
        if lane >= 0:
            lane_busy[lane] += occ
            lane_instrs[lane] += 1
        for k in range(mptr[i], mptr[i + 1]):
            g = mval[k]
            if e > gend[g]:
                gend[g] = e
                gidx[g] = i
    makespan = max(end) if n else 0.0
    critical, critical_ns = _critical_path(end, pred)
    return Schedule(start, end, busy, pred, makespan, lane_busy, lane_instrs, critical, critical_ns)


def _critical_path(end: list[float], pred: list[int]) -> tuple[list[int], dict[int, float]]:
    """Walk back from the last instruction to finish; each step gets the time between its
    predecessor's result and its own (clamped so the parts sum to exactly the makespan)."""
    if not end:
        return [], {}
    i = max(range(len(end)), key=end.__getitem__)
    frontier = end[i]
    path: list[int] = []
    attributed: dict[int, float] = {}
    while i >= 0:
        j = pred[i]
        lo = end[j] if j >= 0 else 0.0
        lo = min(lo, frontier)
        path.append(i)
        attributed[i] = frontier - lo
        frontier = lo
        if j >= i:  # never happens (predecessors come earlier in program order); guards the walk
            break
        i = j
    path.reverse()
    return path, attributed


def schedule(trace: Trace, hw: Hardware, consts: Constants) -> tuple[Prepared, Schedule]:
    """``prepare`` then ``run``."""
    p = prepare(trace, hw)
    return p, run(p, consts)
