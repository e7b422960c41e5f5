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
* All transfers of the core share the per-core aggregate (272 / 368 / 528 GB/s), not HBM peak:
  ``BandwidthPipe`` is a fluid model of that ceiling over time bins of ``BIN_NS``: a transfer fills
  the capacity of the bins from its data start at up to its own rate, so transfers issued later in
  program order can use bandwidth left idle earlier (queues are independent), and the sum never
  exceeds the ceiling. The scheduler (``schedule.py``) puts transfers round-robin on the queues.
* SBUF spills: live SBUF beyond capacity is modelled as ``spill_factor`` x excess bytes of extra
  DMA traffic at full efficiency (``spill``), serial with the kernel.

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

BIN_NS = 512.0  # width of a bandwidth bin: a few 32-128 KiB transfers each; accuracy vs bins per transfer
_FP32_BYTES = 4  # [NL] §5 "Other overheads": casting DMAs go via fp32


@dataclass(slots=True)
class DmaShape:
    """What one transfer moves, as the bandwidth model needs it."""

    nbytes: int  # bytes moved (source side; elements x 4 for a casting DMA)
    row_bytes: int  # descriptor row: contiguous run of the HBM side, at most one partition's bytes
    partitions: int  # partitions of the on-chip side (rows for HBM -> HBM)
    factor: float = 1.0  # throughput relative to a copy (DMA transpose 0.9 / 0.5)
    hbm_bytes: int = 0  # HBM bytes read + written (for bandwidth figures)


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


class BandwidthPipe:
    """The core's aggregate DMA bandwidth as capacity per time bin (a fluid model; see the module doc)."""

    __slots__ = ("cap", "last", "rate", "used")

    def __init__(self, aggregate_bytes_per_ns: float) -> None:
        self.rate = aggregate_bytes_per_ns
        self.cap = aggregate_bytes_per_ns * BIN_NS
        self.used: dict[int, float] = {}  # bin -> capacity used (peak-rate bytes)
        self.last: dict[int, int] = {}  # bin -> the last transfer that used it (critical-path predecessor)

    def transfer(self, t0: float, amount: float, rate: float, idx: int) -> tuple[float, int]:
        """Move ``amount`` units from ``t0`` at most at ``rate``; returns (end, the earlier transfer whose
        use of the bandwidth delayed this one, or -1)."""
        if amount <= 0.0:
            return t0, -1
        used_d, last_d, cap, agg = self.used, self.last, self.cap, self.rate
        t = t0
        remaining = amount
        b = int(t // BIN_NS)
        pred = -1
        while True:
            b_start = b * BIN_NS
            b_end = b_start + BIN_NS
            used = used_d.get(b, 0.0)
            free = cap - used
            own = rate * (b_end - t)
            take = remaining
            take = min(take, free)
            take = min(take, own)
            take = max(take, 0.0)
            if free < own and used > 0.0:  # the shared ceiling, not this transfer's engines, limits this bin
                pred = last_d.get(b, pred)
            remaining -= take
            if take > 0.0:
                used_d[b] = used + take
                if remaining <= 1e-9:
                    end = t + take / rate
                    fill = b_start + (used + take) / agg  # where the bin is filled up to, filled in order
                    if fill > end:
                        if used > 0.0:
                            pred = last_d.get(b, pred)
                        end = min(fill, b_end)
                    last_d[b] = idx
                    return end, pred
                last_d[b] = idx
            t = b_end
            b += 1


@dataclass(slots=True)
class Spill:
    """Extra DMA traffic for SBUF over capacity."""

    excess_bytes: int
    traffic_bytes: int
    ns: float
    note: str


def spill(peak_sbuf_bytes: int, hw: Hardware, consts: Constants) -> Spill | None:
    """The spill traffic of a launch whose live SBUF peaked at ``peak_sbuf_bytes`` (None: it fits)."""
    excess = peak_sbuf_bytes - hw.sbuf_bytes
    if peak_sbuf_bytes <= 0 or excess <= 0:
        return None
    traffic = int(excess * consts.spill_factor)
    ns = traffic / hw.dma_aggregate_bytes_per_ns
    note = (f"SBUF over capacity: peak {peak_sbuf_bytes / 2**20:.2f} MiB live > {hw.sbuf_bytes / 2**20:.2f} MiB "
            f"usable on {hw.target}; spills modelled as {traffic / 2**20:.2f} MiB of extra DMA traffic "
            f"({ns / 1000:.3g} us, serial)")
    return Spill(excess, traffic, ns, note)
