"""Benchmark: simulated kernel wall time / NumPy-reference wall time for every example kernel.

Run: ``.venv/bin/python benchmarks/sim_vs_numpy.py [--repeat 5] [--json out.json]``. Each kernel and its
reference run in this process on the seed-0 inputs; the figure per example is the median kernel time
over ``--repeat`` launches divided by the median reference time. The goal is a median ratio <= 3x.
Timings are wall-clock on whatever machine runs it: compare runs on one machine, not across machines.
Both sides run single-threaded (BLAS, OpenMP and torch pinned to one thread), as the simulation worker
does: the simulator issues many small operations, for which thread pools only add contention.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before NumPy is imported

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def bench_one(kernel_path: Path, task_path: Path, repeat: int) -> dict[str, Any]:
    from nki_agent.toolchain.tasks import find_kernel, load_module, load_task
    from nki_agent.toolchain.judging.verify import _as_list, _extra_args, _to_np, run_reference

    task = load_task(str(task_path))
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
    kernel = find_kernel(load_module(str(kernel_path), "bench_kernel"), task.kernel_name)
    task.seed(0)
    inputs = _as_list(task.get_inputs())
    run_reference(task, inputs)  # builds the Model (if any) and warms caches
    args = [_to_np(x) for x in inputs] + _extra_args(kernel, task, len(inputs))
    launcher = task.launcher(kernel)
    launcher(*args)  # warm-up (imports, code caches)
    k_times, r_times = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        launcher(*args)
        k_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        run_reference(task, inputs)
        r_times.append(time.perf_counter() - t0)
    k, r = statistics.median(k_times), statistics.median(r_times)
    return {"example": kernel_path.parent.name, "kernel": kernel_path.name, "sim_ms": k * 1e3, "ref_ms": r * 1e3,
            "ratio": k / r if r > 0 else float("inf")}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", default=str(ROOT / "examples"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", dest="json_out", default=None)
    args = ap.parse_args(argv)
    rows = []
    for task in sorted(Path(args.examples).glob("*/task.py")):
        for kernel in sorted(task.parent.glob("kernel_*.py")):
            rows.append(bench_one(kernel, task, args.repeat))
            r = rows[-1]
            print(f"{r['example']:<26} {r['kernel']:<18} sim {r['sim_ms']:9.2f} ms  ref {r['ref_ms']:8.2f} ms  "
                  f"ratio {r['ratio']:7.2f}x", flush=True)
    ratios = [r["ratio"] for r in rows]
    med = statistics.median(ratios)
    print(f"\n{len(rows)} kernels; median ratio {med:.2f}x (goal <= 3x); min {min(ratios):.2f}x, max {max(ratios):.2f}x")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"rows": rows, "median_ratio": med}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
