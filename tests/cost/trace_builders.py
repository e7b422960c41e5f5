"""Hand-built instruction traces for the cost model's tests (the ``sim/trace.py`` format, no simulator).

``TB`` allocates storages (2-D, row-major, partition = row), makes ``Access``es of rectangular views
with the same conservative byte ranges and contiguous runs the tracer records, and appends
instructions under the loops opened with ``for it in tb.loop("affine", n): ...``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from nki_agent.toolchain.sim.trace import Access, Instr, Loop, Trace

ITEM = {"bfloat16": 2, "float16": 2, "float32": 4, "tfloat32": 4, "int32": 4, "uint32": 4, "int8": 1,
        "uint8": 1, "float8_e4m3": 1}


@dataclass
class Buf:
    """One storage: ``rows`` x ``cols`` elements, row-major."""

    storage: int
    buffer: str
    rows: int
    cols: int
    dtype: str

    @property
    def item(self) -> int:
        return ITEM[self.dtype]

    def view(self, r0: int = 0, r1: int | None = None, c0: int = 0, c1: int | None = None) -> Access:
        """The access of ``self[r0:r1, c0:c1]``."""
        r1 = self.rows if r1 is None else r1
        c1 = self.cols if c1 is None else c1
        rows, cols, it = r1 - r0, c1 - c0, self.item
        lo = (r0 * self.cols + c0) * it
        hi = ((r1 - 1) * self.cols + c1) * it
        nbytes = rows * cols * it
        run = nbytes if (cols == self.cols or rows == 1) else cols * it
        return Access(self.storage, self.buffer, (rows, cols), self.dtype, nbytes, rows, lo, hi, run)

    def all(self) -> Access:
        return self.view()


@dataclass
class TB:
    """A trace under construction."""

    target: str = "trn1"
    trace: Trace = field(default_factory=Trace)
    serial: int = 0
    stack: list[list[int]] = field(default_factory=list)
    instance: int = 0
    line: int = 10

    def __post_init__(self) -> None:
        self.trace.target = self.target
        self.trace.generation = "classic"

    # -- storages ----------------------------------------------------------------------------------------
    def buf(self, buffer: str, rows: int, cols: int, dtype: str = "bfloat16") -> Buf:
        self.serial += 1
        return Buf(self.serial, buffer, rows, cols, dtype)

    def hbm(self, rows: int, cols: int, dtype: str = "bfloat16") -> Buf:
        return self.buf("hbm", rows, cols, dtype)

    def sbuf(self, rows: int, cols: int, dtype: str = "bfloat16") -> Buf:
        return self.buf("sbuf", rows, cols, dtype)

    def psum(self, rows: int, cols: int, dtype: str = "float32") -> Buf:
        return self.buf("psum", rows, cols, dtype)

    # -- instructions ------------------------------------------------------------------------------------
    def instr(self, api: str, reads: list[Access], writes: list[Access], line: int | None = None,
              **attrs: Any) -> Instr:
        ins = Instr(len(self.trace.instrs), api, self.line if line is None else line,
                    tuple((a, b) for a, b in self.stack), self.instance, list(reads), list(writes), dict(attrs))
        self.trace.instrs.append(ins)
        return ins

    def load(self, dst: Access, src: Access, **kw: Any) -> Instr:
        return self.instr("nl.load", [src], [dst], **kw)

    def store(self, dst: Access, src: Access, **kw: Any) -> Instr:
        return self.instr("nl.store", [src], [dst], **kw)

    def matmul(self, dst: Access, stationary: Access, moving: Access, accumulate: bool = False, **kw: Any) -> Instr:
        if accumulate:
            kw["accumulate"] = True
        return self.instr("nisa.nc_matmul", [stationary, moving], [dst], **kw)

    def op(self, api: str, dst: Access, *srcs: Access, **kw: Any) -> Instr:
        return self.instr(api, list(srcs), [dst], **kw)

    # -- loops -------------------------------------------------------------------------------------------
    def loop(self, kind: str, trips: int, line: int | None = None, var: str = "i") -> Iterator[int]:
        loops = self.trace.loops
        parent = self.stack[-1][0] if self.stack else None
        ln = self.line if line is None else line
        lid = next((lp.id for lp in loops.values() if lp.parent == parent and lp.line == ln and lp.var == var), None)
        if lid is None:
            lid = len(loops) + 1
            loops[lid] = Loop(lid, ln, var, kind, parent)
        loops[lid].entered += 1
        loops[lid].trips = max(loops[lid].trips, trips)
        self.stack.append([lid, -1])
        try:
            for it in range(trips):
                self.stack[-1][1] = it
                yield it
        finally:
            self.stack.pop()


def matmul_tiled(m_tiles: int, n_tiles: int, k_tiles: int, kind: str = "affine", target: str = "trn1",
                 dtype: str = "bfloat16") -> Trace:
    """The matmul tutorial's "Original tiled" kernel: per (m, n, k) a 128x128 lhsT and a 128x512 rhs
    tile load, one matmul accumulating in PSUM; per (m, n) an eviction copy and a store."""
    tb = TB(target)
    lhs_t = tb.hbm(128 * k_tiles, 128 * m_tiles, dtype)
    rhs = tb.hbm(128 * k_tiles, 512 * n_tiles, dtype)
    out = tb.hbm(128 * m_tiles, 512 * n_tiles, dtype)
    for m in tb.loop(kind, m_tiles, line=5, var="m"):
        for n in tb.loop(kind, n_tiles, line=6, var="n"):
            acc = tb.psum(128, 512)
            tb.instr("nl.zeros", [], [acc.all()], line=7)
            for k in tb.loop(kind, k_tiles, line=8, var="k"):
                a = tb.sbuf(128, 128, dtype)
                b = tb.sbuf(128, 512, dtype)
                tb.load(a.all(), lhs_t.view(k * 128, (k + 1) * 128, m * 128, (m + 1) * 128), line=9)
                tb.load(b.all(), rhs.view(k * 128, (k + 1) * 128, n * 512, (n + 1) * 512), line=10)
                tb.matmul(acc.all(), a.all(), b.all(), accumulate=True, line=11)
            res = tb.sbuf(128, 512, dtype)
            tb.op("nl.copy", res.all(), acc.all(), line=12)
            tb.store(out.view(m * 128, (m + 1) * 128, n * 512, (n + 1) * 512), res.all(), line=13)
    return tb.trace
