"""What estimating costs on top of simulating: trace recording + the cost model vs a plain simulation.

For each example kernel (``examples/*/kernel_*.py``) it times, ``--repeat`` times each and interleaved,
one simulation of the task's seed 0 in this process:
- ``plain``: ``simulate_files`` as before the cost model (no trace);
- ``estimated``: the same with ``estimate=True`` (the trace recorded, the cost model run on it);
and, on the recorded trace, the cost model alone (``model``). It prints per kernel and the median of the
per-kernel ratios estimated/plain (goal: <= 1.2, i.e. estimating costs at most 20 % on top).

    .venv/bin/python benchmarks/cost_overhead.py [--repeat 5] [--filter l2_] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _once(kernel: Path, estimate: bool) -> tuple[float, Any]:
    from nki_agent.toolchain.judging.simulate import simulate_files

    recs: list[Any] = []
    t0 = time.perf_counter()
    out = simulate_files(str(kernel), str(kernel.parent / "task.py"), estimate=estimate, on_record=recs.append)
    dt = time.perf_counter() - t0
    if not out["ran"]:
        raise RuntimeError(f"{kernel} did not run: {out['problems'][:1]}")
    if estimate and out.get("estimate") is None:
        raise RuntimeError(f"{kernel}: no estimate")
    return dt, recs[-1] if recs else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--filter", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    from nki_agent.toolchain.cost import estimate

    kernels = sorted(p for p in (ROOT / "examples").glob("l*_*/kernel_*.py") if args.filter in str(p))
    rows = []
    for k in kernels:
        _once(k, False)  # warm imports and caches
        plain, est, model = [], [], []
        for _ in range(args.repeat):
            plain.append(_once(k, False)[0])
            dt, rec = _once(k, True)
            est.append(dt)
            t0 = time.perf_counter()
            estimate(rec.instruction_trace, rec.target, peak_sbuf_bytes=rec.peak_sbuf_bytes)
            model.append(time.perf_counter() - t0)
        p, e, m = statistics.median(plain), statistics.median(est), statistics.median(model)
        rows.append({"kernel": f"{k.parent.name}/{k.stem}", "plain_ms": p * 1e3, "estimated_ms": e * 1e3,
                     "model_ms": m * 1e3, "ratio": e / p})
        print(f"{rows[-1]['kernel']:40} plain {p * 1e3:8.2f} ms  estimated {e * 1e3:8.2f} ms  "
              f"(model {m * 1e3:6.2f} ms)  x{e / p:.3f}", flush=True)
    ratios = [r["ratio"] for r in rows]
    med = statistics.median(ratios)
    print(f"\nmedian estimated/plain: {med:.3f} (max {max(ratios):.3f}); goal <= 1.2: {'met' if med <= 1.2 else 'NOT met'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "median_ratio": med}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
