"""The scheduler: start and end of every instruction, engine busy time, critical path, makespan.

Two phases, so calibration can re-time a trace without re-analysing it:

* ``prepare(trace, hw)`` — constant-free facts: each instruction's lane (``engines.classify``; DMAs
  round-robin over the 16 queues in program order), its formula cycles (``instr_cost``), whether a
  matmul must reload its stationary operand, DMA shapes, and the dependency graph (``deps.build``).
* ``run(prepared, constants)`` — the timing. Each instruction starts when its predecessors' results
  are ready (RAW/WAR/WAW edges, sequential-loop and SPMD-instance barriers) and its lane is free
  (in-order issue per engine, FIFO per DMA queue). Compute instructions are resolved as soon as they
  can issue; what couples lanes in time (the DMA bandwidth, trn1's shared access ports) goes through
  an event queue in time order, so no resource is handed out by program order.
  - compute: busy = max(formula, fixed) and result ready at start + formula + fixed (+ the ~60-cycle
    SBUF access on Vector/Scalar/GpSimd): the fixed per-instruction overhead bounds how fast tiny
    instructions issue and is paid in full by an instruction that waits on its producer (nki-language.md
    §5 "Other overheads": "add ~100 cycles ... when instructions are tiny or each depends on the previous one");
  - TensorE LoadStationary: a matmul whose stationary differs from the previous one pays the LS
    cycles unless it can load in the background, i.e. the previous TensorE instruction is a matmul
    and this one was ready before TensorE became free (§5 LoadStationary row);
  - DMA: data starts ``dma_fixed_ns`` after the trigger and after the previous transfer on its
    queue; the data phase shares the core's aggregate bandwidth with the transfers in flight
    (``dma.FluidPool``, first come first served by data start; a small event loop orders the DMA
    starts and ends);
  - trn1 only: VectorE and GpSimd share SBUF access, VectorE and ScalarE share PSUM access (§5 "v2-only
    contention"), first come, first served.
  The critical path walks back from the last instruction to finish through the predecessor that
  determined each start (a data producer, a barrier, the lane's previous instruction, or the transfer
  whose bandwidth use delayed a DMA).

Not modelled: cross-engine semaphore latency, DMA issue cost on the triggering engine (HWDGE ~600 ns on
v3), a bound on how far loads can run ahead (fresh tiles per iteration act as unbounded buffers; the
FIFO queues are the only limit).

Imports the trace format and the sibling modules ``hardware``, ``engines``, ``instr_cost``, ``dma``, ``deps``.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from ..sim.trace import Instr, Trace
from nki_agent.toolchain.facts.targets import get_target
from . import deps as D
from . import engines as E
from .dma import DmaShape, FluidPool, own_rate, units
from .hardware import SBUF_ACCESS_CYCLES, Constants, Hardware
from .instr_cost import InstrCost, cost

_START, _FINISH, _ISSUE = 0, 1, 2  # events: a DMA's data starts, the next DMA finishes, a port-holding issue


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
    links: D.Links
    lane_order: list[list[int]]  # instructions of each lane in program order
    unknown: dict[str, int] = field(default_factory=dict)  # unmodelled APIs -> count
    folded: int = 0  # PSUM zeroings folded into matmuls
    tile_peak: int | None = None  # peak live SBUF tile by tile (deps.tile_live_peak); None: not computed

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


def _mark_psum_operands(instrs: list[Instr], kinds: list[str]) -> None:
    """Instructions reading a partition broadcast read it from PSUM, where TensorE left it
    (``attrs["psum_operand"]``: tensor_tensor costs N, not 2N; a fact of the trace, the same on every target)."""
    made: set[int] = set()
    for ins, kind in zip(instrs, kinds):
        if made and kind != E.K_PE_BROADCAST and any(a.storage in made for a in ins.reads):
            ins.attrs["psum_operand"] = True
        if kind == E.K_PE_BROADCAST:
            made.update(w.storage for w in ins.writes)


def prepare(trace: Trace, hw: Hardware) -> Prepared:
    """Classify, cost and link every instruction of ``trace`` (no timing)."""
    instrs = trace.instrs
    lanes: list[int] = []
    kinds: list[str] = []
    fmax = get_target(hw.target).gemm_moving_fmax
    for ins in instrs:
        lane, kind = E.classify(ins, fmax)
        lanes.append(lane)
        kinds.append(kind)
    folded = _fold_psum_zeroing(trace, lanes, kinds)
    _mark_psum_operands(instrs, kinds)
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
    order: list[list[int]] = [[] for _ in range(E.DMA + hw.dma_queues)]
    for i, lane in enumerate(lanes):
        if lane >= 0:
            order[lane].append(i)
    return Prepared(hw, trace, lanes, kinds, cycles, costs, ls_cycles, dma, ports, dep, D.links(dep, len(lanes)),
                    order, unknown, folded, D.tile_live_peak(instrs))


def run(p: Prepared, consts: Constants) -> Schedule:
    """Time a prepared trace with ``consts``.

    Compute instructions are resolved as soon as they can issue (their times follow from their inputs);
    DMA transfers go through a small event loop, because a transfer's end depends on every transfer in
    flight with it (``dma.FluidPool``). Every start is at or after the event being processed, so the
    two interleave causally."""
    hw = p.hw
    n = p.n
    lk = p.links
    lanes, cycles, ls_cycles, dma, ports, kinds = p.lanes, p.cycles, p.ls_cycles, p.dma, p.ports, p.kinds
    sptr, sval = lk.succ_ptr, lk.succ_val
    mptr, mval = p.deps.member_ptr, p.deps.member_val
    wptr, wval = lk.waiter_ptr, lk.waiter_val
    inv_clock = [1.0 / hw.clock_ghz(lane) for lane in E.COMPUTE_LANES]
    fixed = [consts.fixed_cycles(lane) * inv_clock[lane] for lane in E.COMPUTE_LANES]
    access = [0.0] + [SBUF_ACCESS_CYCLES * inv_clock[lane] for lane in (E.VECTOR, E.SCALAR, E.GPSIMD)]
    knee, dma_fixed = consts.dma_knee_bytes, consts.dma_fixed_ns
    start = [0.0] * n
    end = [0.0] * n
    busy = [0.0] * n
    pred = [-1] * n
    ready = [0.0] * n
    left = list(lk.waiting)
    gleft = list(lk.group_size)
    gend = [0.0] * p.deps.groups
    gidx = [-1] * p.deps.groups
    order = p.lane_order
    nlanes = p.lane_count
    head = [0] * nlanes
    lane_free = [0.0] * nlanes
    lane_last = [-1] * nlanes
    lane_busy = [0.0] * nlanes
    lane_instrs = [0] * nlanes
    port_free = [0.0, 0.0, 0.0]  # index 1: the SBUF port, 2: the PSUM port (trn1)
    port_last = [-1, -1, -1]
    prev_tensor_mm = False
    pool = FluidPool(hw.dma_aggregate_bytes_per_ns)
    # (time, request time, tie-break, kind, transfer / instruction / version): a port request that has to
    # wait keeps its request time, so the port goes first come, first served (program order on ties)
    events: list[tuple[float, float, int, int, int]] = []
    version = 0
    alone: dict[int, float] = {}
    recent: list[int] = []  # the last transfers to finish (bandwidth predecessors on the critical path)
    taken = bytearray(n)  # issued (a DMA: its start event is queued)
    work: list[int] = [i for i in range(n) if left[i] == 0]
    work.reverse()
    issued = 0

    def resolve(i: int, e: float) -> None:
        """Instruction i's result is ready at e: release its successors and barrier groups."""
        end[i] = e
        for k in range(sptr[i], sptr[i + 1]):
            s = sval[k]
            if e > ready[s] or pred[s] < 0:
                ready[s], pred[s] = e, i
            left[s] -= 1
            if left[s] == 0:
                work.append(s)
        for k in range(mptr[i], mptr[i + 1]):
            g = mval[k]
            if e >= gend[g]:
                gend[g], gidx[g] = e, i
            gleft[g] -= 1
            if gleft[g] == 0:
                ge, gi = gend[g], gidx[g]
                for kk in range(wptr[g], wptr[g + 1]):
                    w = wval[kk]
                    if ge > ready[w] or pred[w] < 0:
                        ready[w], pred[w] = ge, gi
                    left[w] -= 1
                    if left[w] == 0:
                        work.append(w)

    def issue(i: int, lane: int, not_before: float) -> None:
        """Start compute instruction i on its lane (at or after ``not_before``) and resolve it."""
        nonlocal prev_tensor_mm, issued
        lf = lane_free[lane]
        f = cycles[i] * inv_clock[lane]
        if lane == E.TENSOR:
            ls = ls_cycles.get(i)
            if ls is not None and not (prev_tensor_mm and ready[i] <= lf):
                f += ls * inv_clock[0]  # LoadStationary could not overlap a previous matmul
            prev_tensor_mm = kinds[i] in E.MATMUL_KINDS
        fx = fixed[lane]
        occ = max(fx, f)
        s, who = ready[i], pred[i]
        if lf > s:
            s, who = lf, lane_last[lane]
        mask = ports.get(i, 0) if ports else 0
        if not_before > s:  # waited for a shared port: the instruction that held it comes before
            s = not_before
            for bit in (1, 2):
                if mask & bit and port_free[bit] >= s and port_last[bit] >= 0:
                    who = port_last[bit]
        for bit in (1, 2):
            if mask & bit:
                port_free[bit], port_last[bit] = s + occ, i
        start[i], busy[i], pred[i] = s, occ, who
        lane_free[lane], lane_last[lane] = s + occ, i
        lane_busy[lane] += occ
        lane_instrs[lane] += 1
        head[lane] += 1
        issued += 1
        lane_q = order[lane]
        if head[lane] < len(lane_q) and left[lane_q[head[lane]]] == 0:
            work.append(lane_q[head[lane]])
        resolve(i, s + f + fx + access[lane])

    while True:
        while work:  # issue everything that can issue now
            i = work.pop()
            if taken[i]:
                continue  # queued twice: once when ready, once when it became its lane's head
            lane = lanes[i]
            if lane < 0:  # folded by the compiler
                taken[i] = 1
                start[i] = ready[i]
                issued += 1
                resolve(i, ready[i])
                continue
            lane_q = order[lane]
            if lane_q[head[lane]] != i:
                continue  # not yet the head of its lane: queued again when its predecessor on the lane issues
            taken[i] = 1
            who = pred[i]
            if lane >= E.DMA:  # data starts after the fixed latency and after the queue's previous transfer
                s = ready[i] + dma_fixed
                if lane_free[lane] > s:
                    s, who = lane_free[lane], lane_last[lane]
                pred[i] = who
                heapq.heappush(events, (s, s, i, _START, i))
                continue
            mask = ports.get(i, 0) if ports else 0
            if mask:  # a shared access port (trn1): arbitrated in time order by the event loop
                s0 = max(lane_free[lane], ready[i])
                heapq.heappush(events, (s0, s0, i, _ISSUE, i))
                continue
            issue(i, lane, 0.0)
        if not events:
            break
        t, req, _, kind, x = heapq.heappop(events)
        if kind == _ISSUE:
            mask = ports[x]
            s0 = max([port_free[bit] for bit in (1, 2) if mask & bit] + [t])
            if s0 > t:  # the port is taken: try again when it frees (first come, first served)
                heapq.heappush(events, (s0, req, x, _ISSUE, x))
                continue
            issue(x, lanes[x], t)
            continue
        pool.advance(t)
        if kind == _START:
            shape = dma[x]
            u, r = units(shape, knee), own_rate(shape, hw)
            start[x] = t
            alone[x] = u / r
            pool.add(x, u, r)
        elif x != version:
            continue  # a finish computed before the pool changed
        else:
            done = [k for k, st in pool.active.items() if st[0] <= 1e-9 * (1.0 + alone[k] * st[1])]
            if not done:
                done = [pool.next_finish()[1]]
            for k in sorted(done):
                pool.remove(k)
                lane = lanes[k]
                d = t - start[k]
                busy[k] = d
                lane_busy[lane] += d
                lane_instrs[lane] += 1
                lane_free[lane], lane_last[lane] = t, k
                if d > alone.pop(k) * 1.001 + 1e-9:  # slowed by sharing the bandwidth
                    co = next((j for j in reversed(recent) if j < k and end[j] > start[k]), -1)
                    base = end[pred[k]] if pred[k] >= 0 else -1.0
                    if co >= 0 and end[co] > base:
                        pred[k] = co
                recent.append(k)
                if len(recent) > 32:
                    del recent[0]
                issued += 1
                head[lane] += 1
                lane_q = order[lane]
                if head[lane] < len(lane_q) and left[lane_q[head[lane]]] == 0:
                    work.append(lane_q[head[lane]])
                resolve(k, t)
        version += 1
        nt, _nk = pool.next_finish()
        if nt < math.inf:
            heapq.heappush(events, (nt, nt, -1, _FINISH, version))
    assert issued == n, f"scheduler stalled: {issued} of {n} instructions issued"
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
