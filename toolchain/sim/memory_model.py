"""On-chip memory accounting by liveness: when is a tile really needed, and does it all fit?

Python keeps a tile alive until its name is rebound, long after the compiler would have reused its
space, so live-object counting overstates pressure. Instead every on-chip allocation records the
instruction at which it was born and the last instruction that read or wrote it (counted by the
simulation's own ``Simulation.instructions``: simulations share no state); after the kernel
runs, a sweep over these intervals gives the true peak under program order. Per-partition use is
estimated as total bytes / 128: the fullest partition holds at least the average, so an overflow
reported here is one the hardware would have.

A single tile wider than a partition's capacity is an error at its allocation (it can never fit).
Aggregate overflows are warnings: the compiler spills SBUF to HBM and serialises PSUM accumulation
groups (slowly), and published kernels that ran on hardware exceed the naive totals.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

from nki_agent.toolchain.facts.errors import NkiError, Related, SourceLocation

@dataclass
class Interval:
    """Lifetime of one on-chip allocation in instruction counts."""

    born: int
    last: int
    nbytes: int
    kind: str
    name: str
    shape: tuple[int, ...]
    site: SourceLocation | None
    closed: bool = False


@dataclass
class MemoryModel:
    pmax: int
    sbuf_capacity: int  # bytes per partition
    psum_capacity: int  # bytes per partition
    intervals: list[Interval] = field(default_factory=list)
    open: "weakref.WeakKeyDictionary[Any, Interval]" = field(default_factory=weakref.WeakKeyDictionary)

    def allocate(self, storage: Any, kind: str, free_bytes: int, now: int) -> Interval:
        """Register an on-chip allocation at instruction ``now`` (the simulation's own counter); raises when
        this one tile alone cannot fit."""
        cap = self.sbuf_capacity if kind == "sbuf" else self.psum_capacity
        if free_bytes > cap:
            code = "err_stack_overflow_sbuf" if kind == "sbuf" else "err_stack_overflow_psum"
            raise NkiError(code, f"tensor '{storage.name}' {list(storage.shape)} needs {free_bytes} bytes per partition, "
                           f"more than the {cap} bytes of {kind.upper()} each partition has", storage.site)
        iv = Interval(now, now, int(storage.array.nbytes), kind, storage.name, tuple(storage.shape),
                      storage.site)
        self.intervals.append(iv)
        return iv

    def peaks(self) -> dict[str, tuple[int, int, list[Interval]]]:
        """Per memory kind: (peak total bytes, instruction of the peak, intervals live at the peak)."""
        out: dict[str, tuple[int, int, list[Interval]]] = {}
        for kind in ("sbuf", "psum"):
            events: list[tuple[int, int, int]] = []
            ivs = [iv for iv in self.intervals if iv.kind == kind]
            for k, iv in enumerate(ivs):
                events.append((iv.born, 1, k))
                events.append((iv.last + 1, 0, k))  # frees sort before allocations at the same instant
            events.sort()
            cur = best = 0
            at = 0
            for t, is_alloc, k in events:
                cur += ivs[k].nbytes if is_alloc else -ivs[k].nbytes
                if cur > best:
                    best, at = cur, t
            live = [iv for iv in ivs if iv.born <= at <= iv.last]
            out[kind] = (best, at, live)
        return out

    def check(self) -> list[NkiError]:
        """Aggregate capacity problems of the finished run, as warnings."""
        warnings: list[NkiError] = []
        for kind, (peak, _, live) in self.peaks().items():
            cap = self.sbuf_capacity if kind == "sbuf" else self.psum_capacity
            if peak <= cap * self.pmax:
                continue
            live.sort(key=lambda iv: -iv.nbytes)
            related = tuple(Related(iv.site, f"'{iv.name}' {list(iv.shape)}: {iv.nbytes // self.pmax} B/partition, live here")
                            for iv in live[:3] if iv.site is not None)
            newest = max(live, key=lambda iv: (iv.nbytes, iv.born))  # the biggest tile, newest of equals
            per = peak // self.pmax
            if kind == "psum":
                warnings.append(NkiError("err_stack_overflow_psum",
                                         f"PSUM tiles live at the same time need at least {per} bytes per partition, "
                                         f"more than the {cap} bytes (8 banks) available; the compiler must serialise "
                                         "or spill accumulation groups — evict accumulators earlier",
                                         newest.site, related, severity="warning"))
                continue
            warnings.append(NkiError("err_stack_overflow_sbuf",
                                     f"SBUF tiles live at the same time need at least {per} bytes per partition, more "
                                     f"than the {cap} bytes available: the compiler will spill to HBM (slow) or fail "
                                     "under direct allocation", newest.site, related, severity="warning"))
        return warnings
