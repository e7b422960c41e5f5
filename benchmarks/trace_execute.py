"""What tracing in the kernel's jail and executing in a clean one costs: verify and simulate of every example.

For each example kernel (``examples/*/kernel_*.py``) it times, ``--repeat`` times each, as every tool runs
them (jailed workers, the verdict computed in this process):
- ``traced``: ``judge.verify`` as it is now — the reference worker, the kernel's tracer (placeholders, one
  trace for all seeds) and the executor (the program on each seed);
- ``direct``: ``judge.verify(traced=False)`` — the kernel run on each seed in its own process (the design
  before; kept for device roles, where the device computes);
- ``simulate``: ``api.simulate`` (one seed: the task's worker draws the inputs, the tracer and the executor run).
It prints per kernel the seconds and the ratio traced/direct, and the medians (goal: traced/direct <= 1.0).

    .venv/bin/python benchmarks/trace_execute.py [--repeat 3] [--seeds 3] [--filter l1_] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _time(fn: object) -> float:
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--filter", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    from nki_agent.toolchain import api
    from nki_agent.toolchain.judging import judge

    kernels = sorted(k for k in (ROOT / "examples").glob("*/kernel_*.py") if args.filter in str(k))
    rows = []
    for k in kernels:
        task = str(k.parent / "task.py")

        def traced() -> None:
            r = judge.verify(str(k), task, args.seeds, None, None, 300.0, None)
            assert r.correct, (k, r.problems)

        def direct() -> None:
            r = judge.verify(str(k), task, args.seeds, None, None, 300.0, None, traced=False)
            assert r.correct, (k, r.problems)

        def simulate() -> None:
            r = api.simulate(str(k), task)
            assert not [p for p in r.problems if p.severity == "error"], (k, r.problems)

        t = [statistics.median(_time(f) for _ in range(args.repeat)) for f in (traced, direct, simulate)]
        row = {"kernel": f"{k.parent.name}/{k.name}", "traced_s": round(t[0], 3), "direct_s": round(t[1], 3),
               "simulate_s": round(t[2], 3), "ratio": round(t[0] / t[1], 3)}
        rows.append(row)
        print(f"{row['kernel']:48s} traced {t[0]:6.2f}s  direct {t[1]:6.2f}s  x{row['ratio']:.2f}  simulate {t[2]:6.2f}s",
              flush=True)
    ratios = [r["ratio"] for r in rows]
    summary = {"kernels": len(rows), "median_ratio": statistics.median(ratios), "max_ratio": max(ratios),
               "median_traced_s": statistics.median(r["traced_s"] for r in rows),
               "median_direct_s": statistics.median(r["direct_s"] for r in rows),
               "median_simulate_s": statistics.median(r["simulate_s"] for r in rows)}
    print(json.dumps(summary))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
