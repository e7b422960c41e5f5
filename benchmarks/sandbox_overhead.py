"""Cost of the OS sandbox: jailed, judged verification vs the previous single-worker verification.

For each example kernel (``examples/*/kernel_*.py``, 3 seeds) it times, ``--repeat`` times each:
- ``jailed``: ``api.verify`` as every tool runs it (reference worker + kernel worker, each in a
  bubblewrap jail with the seccomp filter, the verdict computed in this process);
- ``baseline``: the design before the jail — ONE unjailed worker subprocess that loads task and
  kernel and runs ``verify_files`` (the same simulator work, compared where the kernel ran);
- ``unjailed``: the same judged verification with namespaces unavailable (the fallback).
It prints the median of the per-kernel ratios jailed/baseline (goal <= 1.3) and the start-up cost of
one jail: ``python -I -S -c pass`` inside bwrap vs outside (median of 20).

    .venv/bin/python benchmarks/sandbox_overhead.py [--repeat 3] [--filter l1_] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ("import sys\nfrom nki_agent.toolchain.judging.verify import verify_files\n"
            "r = verify_files(sys.argv[1], sys.argv[2], seeds=3)\nsys.exit(0 if r.correct else 1)\n")


def _time(fn: object) -> float:
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - t0


def _baseline(kernel: str, task: str) -> None:
    from nki_agent.toolchain.isolation import jail

    env = jail.environment()
    done = subprocess.run([sys.executable, "-I", "-B", "-c", BASELINE, kernel, task], env=env, cwd=ROOT,
                          capture_output=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"baseline failed on {kernel}: {done.stderr.decode()[-500:]}")


def _jailed(kernel: str, task: str) -> None:
    from nki_agent.toolchain import api

    res = api.verify(kernel, task, seeds=3)
    if not res.correct:
        raise RuntimeError(f"{kernel} did not verify: {res.problems}")


def _unjailed(kernel: str, task: str) -> None:
    from nki_agent.toolchain import api

    old = os.environ.get("NKI_AGENT_BWRAP")
    os.environ["NKI_AGENT_BWRAP"] = "/nonexistent"
    try:
        res = api.verify(kernel, task, seeds=3)
    finally:
        if old is None:
            os.environ.pop("NKI_AGENT_BWRAP", None)
        else:
            os.environ["NKI_AGENT_BWRAP"] = old
    if not res.correct or res.sandbox != "unsandboxed":
        raise RuntimeError(f"{kernel}: fallback run failed: {res.problems}")


def startup(n: int = 20) -> dict[str, float]:
    """Median seconds of ``python -I -S -c pass`` in a jail and outside."""
    from nki_agent.toolchain.isolation import jail

    st = jail.status()
    argv = [sys.executable, "-I", "-S", "-c", "pass"]
    plain, jailed = [], []
    for _ in range(n):
        plain.append(_time(lambda: subprocess.run(argv, env=jail.environment(), check=True)))
        if st.available:
            fds = jail.open_seccomp()
            try:
                cmd = jail.command(jail.JailSpec(), argv, st.binary, fds[0] if fds else None)
                jailed.append(_time(lambda: subprocess.run(cmd, env=jail.environment(), check=True, pass_fds=fds)))
            finally:
                for fd in fds:
                    os.close(fd)
    out = {"python_start_s": statistics.median(plain)}
    if jailed:
        out["jailed_python_start_s"] = statistics.median(jailed)
        out["jail_cost_s"] = out["jailed_python_start_s"] - out["python_start_s"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--filter", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    from nki_agent.toolchain.isolation import jail

    st = jail.status()
    print(f"jail: {st.label} ({st.binary or st.reason}; seccomp {'on' if st.seccomp else 'off'})")
    kernels = sorted(p for p in (ROOT / "examples").glob("*/kernel_*.py") if args.filter in str(p))
    rows = []
    for k in kernels:
        task = str(k.parent / "task.py")
        times = {name: [] for name in ("baseline", "jailed", "unjailed")}  # type: dict[str, list[float]]
        for _ in range(args.repeat):  # interleaved, so a slow phase of the machine hits every variant
            times["baseline"].append(_time(lambda: _baseline(str(k), task)))
            times["jailed"].append(_time(lambda: _jailed(str(k), task)))
            times["unjailed"].append(_time(lambda: _unjailed(str(k), task)))
        med = {n: statistics.median(v) for n, v in times.items()}
        row = {"kernel": f"{k.parent.name}/{k.name}", **{f"{n}_s": round(v, 3) for n, v in med.items()},
               "ratio": round(med["jailed"] / med["baseline"], 3)}
        rows.append(row)
        print(f"{row['kernel']:40s} baseline {row['baseline_s']:6.3f} s  jailed {row['jailed_s']:6.3f} s  "
              f"unjailed {row['unjailed_s']:6.3f} s  ratio {row['ratio']:.2f}", flush=True)
    ratios = [r["ratio"] for r in rows]
    summary = {"kernels": len(rows), "median_ratio": statistics.median(ratios) if ratios else None,
               "max_ratio": max(ratios) if ratios else None, **startup()}
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
