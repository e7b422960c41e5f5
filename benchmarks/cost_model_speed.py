"""Benchmark: how fast the cost model handles a large synthetic trace (instructions per second).

Run: ``.venv/bin/python benchmarks/cost_model_speed.py [--instructions 200000] [--target trn1]``.
The trace is the matmul tutorial's "Original tiled" kernel (two tile loads and one accumulating matmul
per step, an eviction and a store per output tile), built by hand in the ``sim/trace.py`` format
(no simulator). It prints the time and instr/s of each phase: ``prepare`` (classification, costs,
dependencies), ``run`` (the schedule for one set of constants: what a calibration step repeats) and
the whole ``estimate`` with the timeline. Wall-clock on this machine: compare runs on one machine.
"""

from __future__ import annotations

import argparse
import json
import time

from nki_agent.toolchain.cost import constants_for, estimate, hardware_for, prepare
from nki_agent.toolchain.cost.schedule import run
from nki_agent.toolchain.sim.trace import Access, Instr, Loop, Trace


class _Builder:
    def __init__(self, target: str) -> None:
        self.trace = Trace(target=target, generation="classic")
        self.serial = 0
        self.stack: list[tuple[int, int]] = []

    def storage(self) -> int:
        self.serial += 1
        return self.serial

    def add(self, api: str, line: int, reads: list[Access], writes: list[Access], **attrs: object) -> None:
        instrs = self.trace.instrs
        instrs.append(Instr(len(instrs), api, line, tuple(self.stack), 0, reads, writes, dict(attrs)))


def _tile(storage: int, buffer: str, rows: int, cols: int, item: int, row0: int = 0, col0: int = 0,
          width: int | None = None) -> Access:
    """A [rows, cols] view at (row0, col0) of a row-major storage ``width`` elements wide."""
    width = cols if width is None else width
    lo = (row0 * width + col0) * item
    hi = ((row0 + rows - 1) * width + col0 + cols) * item
    nbytes = rows * cols * item
    return Access(storage, buffer, (rows, cols), "bfloat16" if item == 2 else "float32", nbytes, rows, lo, hi,
                  nbytes if cols == width else cols * item)


def matmul_trace(instructions: int, target: str) -> Trace:
    m_tiles, n_tiles = 32, 16
    k_tiles = max(1, (instructions // (m_tiles * n_tiles) - 3) // 3)
    b = _Builder(target)
    lhs_t, rhs, out = b.storage(), b.storage(), b.storage()
    mw, nw = 128 * m_tiles, 512 * n_tiles  # HBM widths (elements) of lhsT and rhs/out
    for lid, (line, var, trips) in enumerate(((5, "m", m_tiles), (6, "n", n_tiles), (8, "k", k_tiles)), start=1):
        b.trace.loops[lid] = Loop(lid, line, var, "affine", lid - 1 if lid > 1 else None, trips, 1)
    for m in range(m_tiles):
        for n in range(n_tiles):
            b.stack = [(1, m), (2, n)]
            acc = b.storage()
            b.add("nl.zeros", 7, [], [_tile(acc, "psum", 128, 512, 4)])
            for k in range(k_tiles):
                b.stack = [(1, m), (2, n), (3, k)]
                a, r = b.storage(), b.storage()
                b.add("nl.load", 9, [_tile(lhs_t, "hbm", 128, 128, 2, k * 128, m * 128, mw)],
                      [_tile(a, "sbuf", 128, 128, 2)])
                b.add("nl.load", 10, [_tile(rhs, "hbm", 128, 512, 2, k * 128, n * 512, nw)],
                      [_tile(r, "sbuf", 128, 512, 2)])
                b.add("nisa.nc_matmul", 11, [_tile(a, "sbuf", 128, 128, 2), _tile(r, "sbuf", 128, 512, 2)],
                      [_tile(acc, "psum", 128, 512, 4)], accumulate=True)
            b.stack = [(1, m), (2, n)]
            res = b.storage()
            b.add("nl.copy", 12, [_tile(acc, "psum", 128, 512, 4)], [_tile(res, "sbuf", 128, 512, 2)])
            b.add("nl.store", 13, [_tile(res, "sbuf", 128, 512, 2)],
                  [_tile(out, "hbm", 128, 512, 2, m * 128, n * 512, nw)])
    return b.trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instructions", type=int, default=200_000)
    ap.add_argument("--target", default="trn1")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    t0 = time.perf_counter()
    trace = matmul_trace(args.instructions, args.target)
    n = len(trace.instrs)
    t1 = time.perf_counter()
    prepared = prepare(trace, hardware_for(args.target))
    t2 = time.perf_counter()
    sched = run(prepared, constants_for(args.target))
    t3 = time.perf_counter()
    est = estimate(trace, args.target, timeline=True)
    t4 = time.perf_counter()
    figures = {"instructions": n, "build_s": t1 - t0, "prepare_s": t2 - t1, "run_s": t3 - t2, "estimate_s": t4 - t3,
               "estimate_us": est.latency_us, "bound": est.bound}
    print(f"{n} instructions ({args.target}); estimate {est.summary()}, critical path {len(sched.critical)} instrs")
    for phase, secs in (("prepare", t2 - t1), ("run", t3 - t2), ("estimate (all, with timeline)", t4 - t3)):
        print(f"  {phase:30s} {secs:7.2f} s  {n / secs:10.0f} instr/s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(figures, fh, indent=2)


if __name__ == "__main__":
    main()
