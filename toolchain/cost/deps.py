"""Data dependencies and ordering barriers of a trace, computed once (independent of any timing).

Dependencies: two accesses to the same storage conflict when their conservative byte ranges
``[lo, hi)`` overlap and one is a write (RAW, WAR, WAW); on-chip storages compare (partition, byte in
row) rectangles instead, so column blocks of one tile are independent (``_Segments.key``). Per storage
a sorted map of disjoint key segments holds the last writer of each segment and its readers since that write — one reader per
lane, because on an in-order lane (an engine, a FIFO DMA queue) the last reader finishes last. A
write replaces the segments it covers, so the map stays as small as the distinct tile boundaries of
the storage; reads of a storage never written (kernel inputs) are kept as one coarse reader set.
Work per access is O(log k + segments covered): traces of ~1M instructions are fine.

Edges between two instructions on the same lane are dropped for WAR and WAW (in-order issue already
orders them, e.g. a chain of matmuls accumulating into one PSUM bank streams back to back); RAW
edges are kept on every lane (a dependent instruction waits for its producer's result).

Barriers (groups): an instruction of iteration k of a ``sequential_range`` loop waits for every
instruction of iteration k-1 (of the same execution of the loop); SPMD instance n waits for all of
instance n-1 (instances run one after another on one core). ``affine`` / ``range`` / ``static``
iterations only wait on data.

Liveness (``tile_live_peak``): the same key space gives the SBUF regions the allocator sees (a tile of a
whole-problem buffer, a column block of a partition-major one), each live from its first access to its
last — what the spill model charges against (``dma.spill``).

Imports only the trace format.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from ..sim.trace import Access, Instr, Trace


@dataclass
class Deps:
    """Dependency edges (CSR: predecessors of i are ``val[ptr[i]:ptr[i+1]]``) and barrier groups."""

    ptr: array
    val: array
    wait_ptr: array  # groups instruction i waits for
    wait_val: array
    member_ptr: array  # groups instruction i belongs to (its end time counts towards them)
    member_val: array
    groups: int

    def preds(self, i: int) -> list[int]:
        return list(self.val[self.ptr[i]:self.ptr[i + 1]])


_ROW, _COL = 1, 2  # key spaces of a storage: raw byte offsets, or (partition, byte in row) column-major
_PMAX = 128  # on-chip storages have at most 128 partitions: the column-major key is byte_in_row * 128 + partition


def _rows(a: Access) -> int:
    """Rows of the access in the simulator's storage layout (its first axis): the byte ranges are of that
    layout, which puts block axes in front of a ``par_dim`` (``Access.partitions`` is the hardware's)."""
    return a.shape[0] if a.shape else 1


class _Segments:
    """Disjoint key segments of one storage: last writer and readers (lane -> instr) of each."""

    __slots__ = ("hi", "lo", "mode", "pre", "r", "stride", "w")

    def __init__(self) -> None:
        self.lo: list[int] = []
        self.hi: list[int] = []
        self.w: list[int] = []
        self.r: list[dict[int, int] | None] = []
        self.pre: dict[int, int] = {}  # readers before the first write (coarse: the whole storage)
        self.mode = 0  # decided at the storage's first access: _ROW or _COL
        self.stride = 0  # _COL: bytes per partition

    def key(self, a: Access) -> tuple[int, int]:
        """The key range of an access: it contains the key of every byte the access may touch.

        On-chip storages are partition-major, so a column block ``t[:, j, :]`` of a tile is a strided
        byte range that overlaps every other block's; in (partition, byte in row) it is a rectangle, and
        a rectangle spanning the partitions is one exact range of column-major keys. The partition stride
        is inferred from the storage's first access (a contiguous-per-partition view over >= 2 partitions);
        an access that does not decompose exactly gets all columns of the rows it touches (still sound).
        Rows past 128 (block axes in front of a ``par_dim`` in the simulator's layout) are blocks of 128
        rows, each its own key range, so the tiles ``buf[i]`` of a whole-problem buffer do not overlap."""
        if not self.mode:
            self.mode, self.stride = _ROW, 0
            p = _rows(a)
            if a.buffer != "hbm" and p >= 2 and a.nbytes % p == 0:
                w = a.nbytes // p
                span = a.hi - a.lo - w
                if a.run >= w and span > 0 and span % (p - 1) == 0 and span // (p - 1) >= w:
                    self.mode, self.stride = _COL, span // (p - 1)
        if self.mode == _ROW:
            return a.lo, a.hi
        stride = self.stride
        p = max(1, _rows(a))
        w = a.nbytes // p
        p0, c0 = divmod(a.lo, stride)
        p_last = p0 + p - 1
        c1 = a.hi - p_last * stride
        block = stride * _PMAX  # keys of one block of 128 rows (block axes in front of a par_dim: row >= 128)
        if a.run >= w and c0 < c1 <= stride and c1 - c0 >= w and p0 // _PMAX == p_last // _PMAX:
            b = p0 // _PMAX * block
            return b + c0 * _PMAX + p0 % _PMAX, b + (c1 - 1) * _PMAX + p_last % _PMAX + 1
        r0, r1 = a.lo // stride, (a.hi - 1) // stride + 1
        b0, b1 = r0 // _PMAX, (r1 - 1) // _PMAX
        if b0 == b1:
            return b0 * block + r0 % _PMAX, b0 * block + (stride - 1) * _PMAX + (r1 - 1) % _PMAX + 1
        return b0 * block, (b1 + 1) * block

    def span(self, lo: int, hi: int) -> tuple[int, int]:
        los = self.lo
        i0 = bisect_right(los, lo) - 1
        if i0 < 0 or self.hi[i0] <= lo:
            i0 += 1
        return i0, bisect_left(los, hi, i0)

    def write(self, lo: int, hi: int, idx: int) -> None:
        i0, i1 = self.span(lo, hi)
        if i1 - i0 == 1 and self.lo[i0] == lo and self.hi[i0] == hi:
            self.w[i0] = idx
            self.r[i0] = None
            return
        nlo: list[int] = [lo]
        nhi: list[int] = [hi]
        nw: list[int] = [idx]
        nr: list[dict[int, int] | None] = [None]
        if i0 < i1:
            if self.lo[i0] < lo:
                nlo.insert(0, self.lo[i0])
                nhi.insert(0, lo)
                nw.insert(0, self.w[i0])
                nr.insert(0, self.r[i0])
            last = i1 - 1
            if self.hi[last] > hi:
                nlo.append(hi)
                nhi.append(self.hi[last])
                nw.append(self.w[last])
                nr.append(self.r[last])
        self.lo[i0:i1] = nlo
        self.hi[i0:i1] = nhi
        self.w[i0:i1] = nw
        self.r[i0:i1] = nr

    def read(self, lo: int, hi: int, lane: int, idx: int) -> None:
        i0, i1 = self.span(lo, hi)
        if i1 - i0 == 1 and self.lo[i0] == lo and self.hi[i0] == hi:
            old = self.r[i0]
            new = dict(old) if old else {}
            new[lane] = idx
            self.r[i0] = new
            return
        out: list[tuple[int, int, int, dict[int, int] | None]] = []
        mine = {lane: idx}
        cur = lo
        for k in range(i0, i1):
            slo, shi, w, r = self.lo[k], self.hi[k], self.w[k], self.r[k]
            if slo < lo:  # the part before the read keeps its readers
                out.append((slo, lo, w, r))
                slo = lo
            if cur < slo:  # a gap never written: a segment with this reader only
                out.append((cur, slo, -1, mine))
            mid = min(hi, shi)
            upd = dict(r) if r else {}
            upd[lane] = idx
            out.append((slo, mid, w, upd))
            if shi > hi:
                out.append((hi, shi, w, r))
            cur = mid
        if cur < hi:
            out.append((cur, hi, -1, mine))
        self.lo[i0:i1] = [o[0] for o in out]
        self.hi[i0:i1] = [o[1] for o in out]
        self.w[i0:i1] = [o[2] for o in out]
        self.r[i0:i1] = [o[3] for o in out]


def tile_live_peak(instrs: Sequence[Instr]) -> int:
    """Peak live SBUF bytes of a trace the way the allocator sees a buffer: region by region. The regions
    of a storage are the unions of its accesses that overlap in the dependency key space (``_Segments.key``:
    a tile of a whole-problem buffer, a column block of a 128-partition tile); a region is live from its
    first access to its last, with its bytes (at most its key extent), and a storage never counts more
    than its extent. So a whole-problem buffer indexed by a loop variable (``buf[i]`` written and read in
    iteration ``i``) is live one tile at a time, while tiles written in one loop and read in a later one
    are all live in between (issue 24: a program-order peak charges the whole buffer for the whole launch)."""
    segs: dict[int, _Segments] = {}
    regions: dict[int, dict[tuple[int, int], list[int]]] = {}
    extent: dict[int, int] = {}
    for i, ins in enumerate(instrs):
        for accesses in (ins.reads, ins.writes):
            for a in accesses:
                if a.buffer != "sbuf" or a.nbytes <= 0:
                    continue
                sg = segs.get(a.storage)
                if sg is None:
                    sg = segs[a.storage] = _Segments()
                    regions[a.storage] = {}
                k = sg.key(a)
                iv = regions[a.storage].get(k)
                if iv is None:
                    regions[a.storage][k] = [i, i, a.nbytes]
                else:
                    iv[1] = i
                    if a.nbytes > iv[2]:
                        iv[2] = a.nbytes
                if a.hi > extent.get(a.storage, 0):
                    extent[a.storage] = a.hi
    deltas: dict[int, int] = {}
    for st, keyed in regions.items():
        ev: list[tuple[int, int]] = []
        glo = ghi = -1
        first = last = total = 0
        for (klo, khi), (f, la, nb) in sorted(keyed.items()):
            if glo >= 0 and klo < ghi:  # overlaps the open region: merge
                ghi, first, last, total = max(ghi, khi), min(first, f), max(last, la), total + nb
                continue
            if glo >= 0:
                ev += [(first, min(total, ghi - glo)), (last + 1, -min(total, ghi - glo))]
            glo, ghi, first, last, total = klo, khi, f, la, nb
        if glo >= 0:
            ev += [(first, min(total, ghi - glo)), (last + 1, -min(total, ghi - glo))]
        ev.sort()
        cap = extent.get(st, 0)
        cur = shown = 0
        j = 0
        while j < len(ev):  # the storage's live bytes, capped at its extent, as deltas
            t = ev[j][0]
            while j < len(ev) and ev[j][0] == t:
                cur += ev[j][1]
                j += 1
            capped = min(cur, cap)
            if capped != shown:
                deltas[t] = deltas.get(t, 0) + capped - shown
                shown = capped
    peak = cur = 0
    for t in sorted(deltas):
        cur += deltas[t]
        peak = max(peak, cur)
    return peak


class _Seq:
    """One execution of a sequential loop: its iteration and the barrier groups of it and the one before."""

    __slots__ = ("current", "iteration", "prefix", "previous")

    def __init__(self, prefix: tuple[tuple[int, int], ...], iteration: int, current: int) -> None:
        self.prefix = prefix
        self.iteration = iteration
        self.current = current
        self.previous = -1


def build(trace: Trace, lanes: Sequence[int]) -> Deps:
    """The ``Deps`` of ``trace`` whose instruction i runs on ``lanes[i]`` (a DMA's queue lane; -1 = free)."""
    ptr = array("q", [0])
    val = array("q")
    wait_ptr = array("q", [0])
    wait_val = array("q")
    member_ptr = array("q", [0])
    member_val = array("q")
    stores: dict[int, _Segments] = {}
    sequential = {lid for lid, lp in trace.loops.items() if lp.kind == "sequential"}
    seq_state: dict[int, _Seq] = {}
    groups = 0
    inst_current = -1
    inst_group = -1
    inst_prev_group = -1
    for i, ins in enumerate(trace.instrs):
        lane = lanes[i]
        preds: set[int] = set()
        # -- data dependencies ---------------------------------------------------------------------------
        rkeys = []
        for a in ins.reads:
            segs = stores.get(a.storage)
            if segs is None:
                segs = stores[a.storage] = _Segments()
            lo, hi = segs.key(a)
            if hi <= lo:
                continue  # no bytes: no dependency
            rkeys.append((segs, lo, hi))
            if not segs.lo:
                continue
            i0, i1 = segs.span(lo, hi)
            for k in range(i0, i1):
                w = segs.w[k]
                if w >= 0:
                    preds.add(w)  # RAW
        wkeys = []
        for a in ins.writes:
            segs = stores.get(a.storage)
            if segs is None:
                segs = stores[a.storage] = _Segments()
            lo, hi = segs.key(a)
            if hi <= lo:
                continue
            wkeys.append((segs, lo, hi))
            for rl, ri in segs.pre.items():
                if rl != lane or lane < 0:
                    preds.add(ri)  # WAR against reads before the first write (coarse)
            i0, i1 = segs.span(lo, hi)
            for k in range(i0, i1):
                w = segs.w[k]
                if w >= 0 and (lane < 0 or lanes[w] != lane):
                    preds.add(w)  # WAW
                r = segs.r[k]
                if r:
                    for rl, ri in r.items():
                        if rl != lane or lane < 0:
                            preds.add(ri)  # WAR
        preds.discard(i)
        val.extend(preds)
        ptr.append(len(val))
        for segs, lo, hi in rkeys:
            if not segs.lo:
                segs.pre[lane] = i
            else:
                segs.read(lo, hi, lane, i)
        for segs, lo, hi in wkeys:
            segs.write(lo, hi, i)
        # -- barriers --------------------------------------------------------------------------------------
        if ins.instance != inst_current:
            inst_current = ins.instance
            inst_prev_group, inst_group = inst_group, groups
            groups += 1
        if inst_prev_group >= 0:
            wait_val.append(inst_prev_group)
        member_val.append(inst_group)
        if sequential:
            for depth, (lid, it) in enumerate(ins.loops):
                if lid not in sequential:
                    continue
                prefix = ins.loops[:depth]
                st = seq_state.get(lid)
                if st is None or st.prefix != prefix:  # a new execution of the loop
                    st = seq_state[lid] = _Seq(prefix, it, groups)
                    groups += 1
                elif st.iteration != it:  # the next iteration waits for this one
                    st.iteration, st.previous, st.current = it, st.current, groups
                    groups += 1
                if st.previous >= 0:
                    wait_val.append(st.previous)
                member_val.append(st.current)
        wait_ptr.append(len(wait_val))
        member_ptr.append(len(member_val))
    return Deps(ptr, val, wait_ptr, wait_val, member_ptr, member_val, groups)


@dataclass
class Links:
    """The inverse of ``Deps`` for the event-driven scheduler: successors, predecessor counts, barrier
    group sizes and the instructions waiting on each group."""

    succ_ptr: array
    succ_val: array
    waiting: array  # predecessors + groups instruction i waits for
    group_size: array
    waiter_ptr: array
    waiter_val: array


def _invert(n: int, ptr: array, val: array) -> tuple[array, array]:
    counts = [0] * (n + 1)
    for j in val:
        counts[j + 1] += 1
    for k in range(n):
        counts[k + 1] += counts[k]
    out = array("q", bytes(8 * len(val)))
    fill = counts[:]
    for i in range(len(ptr) - 1):
        for k in range(ptr[i], ptr[i + 1]):
            j = val[k]
            out[fill[j]] = i
            fill[j] += 1
    return array("q", counts), out


def links(deps: Deps, n: int) -> Links:
    """``Links`` of ``deps`` over ``n`` instructions."""
    succ_ptr, succ_val = _invert(n, deps.ptr, deps.val)
    waiter_ptr, waiter_val = _invert(deps.groups, deps.wait_ptr, deps.wait_val)
    waiting = array("q", ((deps.ptr[i + 1] - deps.ptr[i]) + (deps.wait_ptr[i + 1] - deps.wait_ptr[i])
                          for i in range(n)))
    size = array("q", bytes(8 * deps.groups))
    for g in deps.member_val:
        size[g] += 1
    return Links(succ_ptr, succ_val, waiting, size, waiter_ptr, waiter_val)
