"""Benchmark: repair rate and time per fix of an agent backend on the project's mutation suite.

Run: ``.venv/bin/python benchmarks/agent_repair.py [--backend rules] [--jobs 2] [--limit N] [--json out.json]``.
Each mutant (a broken variant of an example kernel, ``nki_agent.agent.mutations``) gets one full agent
run — initial verification, backend turns, re-verification on 3 seeds in the sandbox — exactly as
``nki-agent fix`` does. A mutant counts as repaired only if the run ends "verified". Reported: repaired /
total per operator and per family (``quick_fix``: bugs a deterministic fix targets; ``logic``: bugs none
does), and the median wall time of a successful repair. ``--in-process`` skips the sandbox (faster, for
smoke runs; the figures to report come from sandboxed runs).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any


def repair_one(mutant: Any, backend: str, isolate: bool) -> dict[str, Any]:
    from nki_agent.agent.backends import make_chain
    from nki_agent.agent.loop import AgentConfig, run_agent
    from nki_agent.agent.router import Router
    from nki_agent.agent.snapshot import Snapshot

    with tempfile.TemporaryDirectory(prefix="nki-repair-") as tmp:
        folder = Path(tmp) / Path(mutant.kernel_path).parent.name
        folder.mkdir()
        path = folder / Path(mutant.kernel_path).name
        path.write_text(mutant.text)
        t0 = time.perf_counter()
        res = run_agent(Snapshot(path.as_uri(), 1, mutant.text), str(path), mutant.task_path,
                        Router(make_chain(backend)), AgentConfig(trajectory_dir=None, isolate=isolate))
        seconds = time.perf_counter() - t0
    return {"id": mutant.id, "operator": mutant.operator, "verdict": res.verdict, "turns": res.turns,
            "seconds": round(seconds, 3), "reason": res.reason[:200]}


def summarize(rows: list[dict[str, Any]], families: dict[str, str]) -> dict[str, Any]:
    by_op: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_op[r["operator"]].append(r)
    broken = [r for r in rows if r["verdict"] != "already_correct"]
    fixed = [r for r in broken if r["verdict"] == "verified"]
    fam: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in broken:
        f = families.get(r["operator"], "?")
        fam[f][1] += 1
        fam[f][0] += r["verdict"] == "verified"
    return {
        "mutants": len(rows), "broken": len(broken), "repaired": len(fixed),
        "repair_rate": round(len(fixed) / len(broken), 4) if broken else 0.0,
        "median_seconds_per_fix": round(statistics.median(r["seconds"] for r in fixed), 3) if fixed else None,
        "median_seconds_per_run": round(statistics.median(r["seconds"] for r in broken), 3) if broken else None,
        "by_family": {f: {"repaired": a, "total": b} for f, (a, b) in sorted(fam.items())},
        "by_operator": {op: {"repaired": sum(r["verdict"] == "verified" for r in rs),
                             "total": sum(r["verdict"] != "already_correct" for r in rs)}
                        for op, rs in sorted(by_op.items())},
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from nki_agent.agent.mutations import mutants, operators

    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--backend", default="rules", help="backend chain spec (default: rules, offline)")
    ap.add_argument("--jobs", type=int, default=2, help="mutants repaired in parallel")
    ap.add_argument("--limit", type=int, default=None, help="first N mutants (round-robin over operators)")
    ap.add_argument("--operators", default="", help="comma-separated operator names (default: all)")
    ap.add_argument("--in-process", action="store_true", help="no sandbox (smoke runs only)")
    ap.add_argument("--json", default="", help="write per-mutant rows and the summary here")
    args = ap.parse_args(argv)
    ops = [o for o in args.operators.split(",") if o] or None
    suite = mutants(operators=ops, limit=args.limit)
    families = {o.name: o.family for o in operators()}
    t0 = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            rows = list(pool.map(repair_one, suite, [args.backend] * len(suite), [not args.in_process] * len(suite)))
    else:
        rows = [repair_one(m, args.backend, not args.in_process) for m in suite]
    summary = summarize(rows, families)
    summary["wall_seconds"] = round(time.perf_counter() - t0, 1)
    summary["backend"] = args.backend
    print(f"{'operator':20} {'family':10} repaired/total")
    for op, s in summary["by_operator"].items():
        print(f"{op:20} {families.get(op, '?'):10} {s['repaired']}/{s['total']}")
    print(f"\nbackend {args.backend}: repaired {summary['repaired']} of {summary['broken']} broken mutants "
          f"({100 * summary['repair_rate']:.1f}%); by family: "
          + ", ".join(f"{f} {v['repaired']}/{v['total']}" for f, v in summary["by_family"].items()))
    print(f"median time per successful fix {summary['median_seconds_per_fix']} s, per run "
          f"{summary['median_seconds_per_run']} s; wall {summary['wall_seconds']} s with {args.jobs} job(s)")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
