"""DMA time: the shape of one transfer, its efficiency, the core's shared bandwidth, and SBUF spills.

Model (nki-language.md §5 "Hardware numbers", "Engines" and "Other overheads"; latency-ground-truth.md "DMA"):

* One transfer spreads over the core's 16 DMA engines, each serving 8 partitions, so a transfer of
  P partitions uses ceil(P/8) engines (at most 16) and its own rate is engines x per-engine bandwidth
  (17 / 23 / 33 B/ns).
* Descriptor rows are the innermost contiguous run of the HBM side (``Access.run``), at most one
  partition's bytes. Small rows are packet-rate bound: a row of r bytes runs at
  ``efficiency(r) = (r / (r + knee)) / (4096 / (4096 + knee))`` of peak, capped at 1 (4 KiB saturates).
  ``knee`` is the FREE constant ``dma_knee_bytes``. A transfer needs ``bytes / efficiency`` bytes of
  peak-rate capacity ("units").
* Every transfer pays ``dma_fixed_ns`` (~1300 ns) between its trigger and its first byte; that latency
  overlaps other transfers' data.
* All transfers in flight share the per-core aggregate (272 / 368 / 528 GB/s), not HBM peak:
  ``FluidPool`` is a fluid model of that ceiling, served first come, first served by data start
  (each transfer at most at its own rate). The scheduler (``schedule.py``) puts transfers round-robin on the queues (FIFO each).
* SBUF spills: live SBUF beyond capacity is modelled as ``spill_factor`` x excess bytes of extra
  DMA traffic at full efficiency (``spill``), serial with the kernel. Live means live tile by tile
  (``deps.tile_live_peak``), as the allocator sees a loop-indexed buffer; over capacity only by whole
  buffers is a zero-time "may spill" note.

Imports only the trace format and ``hardware``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..sim.trace import Access, Instr
from .hardware import (
    DMA_SATURATE_ROW_BYTES,
    DMA_TRANSPOSE_HBM_FACTOR,
    DMA_TRANSPOSE_SBUF_FACTOR,
    Constants,
    Hardware,
)

_FP32_BYTES = 4  # [NL] §5 "Other overheads": casting DMAs go via fp32


@dataclass(slots=True)
class DmaShape:
    """What one transfer moves, as the bandwidth model needs it."""

    nbytes: int  # bytes moved (source side; elements x 4 for a casting DMA)
    row_bytes: int  # descriptor row: contiguous run of the HBM side, at most one partition's bytes
    partitions: int  # partitions of the on-chip side (rows for HBM -> HBM)
    factor: float = 1.0  # throughput relative to a copy (DMA transpose 0.9 / 0.5)
    hbm_bytes: int = 0  # HBM bytes read + written (for bandwidth figures)


def _itemsize(a: Access) -> int:
    n = _elements(a)
    return max(1, a.nbytes // n) if n else 1


def _elements(a: Access) -> int:
    n = 1
    for s in a.shape:
        n *= s
    return n


def dma_shape(instr: Instr, transpose: bool = False) -> DmaShape:
    """The ``DmaShape`` of a traced DMA instruction (load, store, dma_copy, HBM-side assignment)."""
    reads, writes = instr.reads, instr.writes
    src = reads if reads else writes
    nbytes = sum(a.nbytes for a in src)
    hbm = [a for a in reads if a.buffer == "hbm"] + [a for a in writes if a.buffer == "hbm"]
    chip = [a for a in reads if a.buffer != "hbm"] + [a for a in writes if a.buffer != "hbm"]
    hbm_bytes = sum(a.nbytes for a in hbm)
    if reads and writes and reads[0].dtype != writes[0].dtype:
        nbytes = _elements(reads[0]) * _FP32_BYTES  # a casting DMA moves fp32
    if chip:
        c = chip[0]
        partitions = max(1, c.partitions)
        per_partition = max(1, c.nbytes // partitions)
        runs = [a.run for a in hbm if a.run > 0] or [a.run for a in chip if a.run > 0] or [per_partition]
        row = min(min(runs), per_partition)
        item = _itemsize(c)
        if hbm and row <= item < per_partition and partitions > 1:
            # HBM rows walk across partitions (a transposing load/store, e.g. out[i_q, i_d] = tile[d, q]):
            # element-wise descriptors would be absurd; the DMA transposes, gathering one element per
            # partition into each HBM row ([NL] §5 "Other overheads": DMA transpose ≈ 90% of copy throughput)
            transpose = True
            row = partitions * item
    else:  # HBM -> HBM: rows of the innermost run
        runs = [a.run for a in hbm if a.run > 0] or [nbytes]
        row = max(1, min(runs))
        partitions = max(1, nbytes // row)
    factor = 1.0
    if transpose:
        factor = DMA_TRANSPOSE_HBM_FACTOR if hbm else DMA_TRANSPOSE_SBUF_FACTOR
    return DmaShape(nbytes, max(1, row), partitions, factor, hbm_bytes)


def efficiency(row_bytes: float, knee: float) -> float:
    """Fraction of peak a transfer of ``row_bytes`` descriptor rows reaches (1 at >= 4 KiB)."""
    if row_bytes >= DMA_SATURATE_ROW_BYTES:
        return 1.0
    r = max(float(row_bytes), 1.0)
    k = max(knee, 1e-9)
    sat = DMA_SATURATE_ROW_BYTES / (DMA_SATURATE_ROW_BYTES + k)
    return min(1.0, (r / (r + k)) / sat)


def engines_used(partitions: int, hw: Hardware) -> int:
    """DMA engines one transfer spreads over: one per 8 partitions, at most all of them."""
    return max(1, min(hw.dma_engines, math.ceil(partitions / hw.dma_partitions_per_engine)))


def units(shape: DmaShape, knee: float) -> float:
    """Peak-rate bytes the transfer occupies (its bytes / efficiency / transpose factor)."""
    return shape.nbytes / (efficiency(shape.row_bytes, knee) * shape.factor)


def own_rate(shape: DmaShape, hw: Hardware) -> float:
    """Peak-rate bytes per ns the transfer can move on the engines it spreads over."""
    return engines_used(shape.partitions, hw) * hw.dma_engine_bytes_per_ns


def transfer_ns(shape: DmaShape, hw: Hardware, consts: Constants) -> float:
    """Time of one transfer alone on the core: fixed latency + units / own rate."""
    return consts.dma_fixed_ns + units(shape, consts.dma_knee_bytes) / own_rate(shape, hw)


class FluidPool:
    """The core's aggregate DMA bandwidth shared by the transfers in flight (a fluid model).

    Bandwidth goes first come, first served by data start (ties: program order): each transfer takes
    up to its own rate from what the earlier ones left, so a single-engine transfer never exceeds
    17 B/ns, wide transfers fill the rest, and the sum never exceeds the per-core aggregate. The real
    queues round-robin, which changes which of the concurrent transfers finishes first but not the
    throughput; serving the oldest first delivers the data a pipeline needs first and keeps the
    estimate monotone (a prefetch never delays the transfer issued before it). The scheduler calls
    ``advance`` before every change of the active set and ``next_finish`` after it."""

    __slots__ = ("active", "aggregate", "rates", "t")

    def __init__(self, aggregate_bytes_per_ns: float) -> None:
        self.aggregate = aggregate_bytes_per_ns
        self.active: dict[int, list[float]] = {}  # transfer -> [units left, own rate] (insertion = start order)
        self.rates: dict[int, float] = {}
        self.t = 0.0

    def advance(self, t: float) -> None:
        """Move every active transfer forward to time ``t``."""
        dt = t - self.t
        if dt > 0.0:
            rates = self.rates
            for k, st in self.active.items():
                st[0] -= rates[k] * dt
        self.t = t

    def add(self, idx: int, amount: float, rate: float) -> None:
        self.active[idx] = [amount, rate]
        self._reflow()

    def remove(self, idx: int) -> None:
        del self.active[idx]
        self._reflow()

    def _reflow(self) -> None:
        left = self.aggregate
        rates: dict[int, float] = {}
        for idx, st in self.active.items():  # in start order
            r = min(left, st[1])
            rates[idx] = r
            left -= r
        self.rates = rates

    def next_finish(self) -> tuple[float, int]:
        """(time, transfer) of the next transfer to complete at the current rates ((inf, -1): none)."""
        best_t, best = math.inf, -1
        for k, st in self.active.items():
            r = self.rates[k]
            if r <= 0.0:
                continue  # waiting for bandwidth
            t = self.t + (st[0] / r if st[0] > 0.0 else 0.0)
            if t < best_t or (t == best_t and k < best):
                best_t, best = t, k
        return best_t, best


@dataclass(slots=True)
class Spill:
    """Extra DMA traffic for SBUF over capacity."""

    excess_bytes: int
    traffic_bytes: int
    ns: float
    note: str


def spill(peak_sbuf_bytes: int, hw: Hardware, consts: Constants, tile_peak: int | None = None) -> Spill | None:
    """The spill traffic of a launch whose live SBUF peaked at ``peak_sbuf_bytes`` (None: it fits).

    ``tile_peak``: the trace's tile-by-tile liveness (``deps.tile_live_peak``); when given, only the excess
    both measures agree on is charged, and a launch over capacity by the simulator's whole-storage
    liveness but not by the tiles gets a zero-time "may spill" note."""
    if tile_peak is not None and peak_sbuf_bytes > hw.sbuf_bytes >= tile_peak:
        note = (f"SBUF may spill: {peak_sbuf_bytes / 2**20:.2f} MiB of buffers are allocated at once (> "
                f"{hw.sbuf_bytes / 2**20:.2f} MiB usable on {hw.target}), but the tiles live at the same time "
                f"peak at {tile_peak / 2**20:.2f} MiB; no spill time is charged")
        return Spill(0, 0, 0.0, note)
    if tile_peak is not None:
        peak_sbuf_bytes = min(peak_sbuf_bytes, tile_peak)
    excess = peak_sbuf_bytes - hw.sbuf_bytes
    if peak_sbuf_bytes <= 0 or excess <= 0:
        return None
    traffic = int(excess * consts.spill_factor)
    ns = traffic / hw.dma_aggregate_bytes_per_ns
    note = (f"SBUF over capacity: peak {peak_sbuf_bytes / 2**20:.2f} MiB live > {hw.sbuf_bytes / 2**20:.2f} MiB "
            f"usable on {hw.target}; spills modelled as {traffic / 2**20:.2f} MiB of extra DMA traffic "
            f"({ns / 1000:.3g} us, serial)")
    return Spill(excess, traffic, ns, note)
