"""Wall time of ``api.verify`` and ``api.simulate`` on every example kernel, as every tool calls them (jailed).

Only the public façade is used (``api.verify(kernel, task, seeds=...)``, ``api.simulate(kernel, task)``),
so the same script times any revision of the project: run it once with this checkout's Python and once
with an older checkout's, on the same examples, and compare the medians.

    .venv/bin/python benchmarks/verify_speed.py [--repeat 3] [--seeds 3] [--examples examples] [--json out.json]
    # an older revision, same examples (its own checkout and venv beside this one, same ml-dtypes):
    git worktree add ../nki-before REV && python3 -m venv ../nki-before-venv \
      && ../nki-before-venv/bin/pip install -e '../nki-before[torch]' "ml-dtypes==$(.venv/bin/python -c 'import ml_dtypes; print(ml_dtypes.__version__)')" \
      && (here=$PWD; cd ../nki-before && ../nki-before-venv/bin/python "$here/benchmarks/verify_speed.py" --examples "$here/examples")

It prints per kernel the median seconds of each and, last, a JSON summary with the medians over kernels.

Like the editor's server and the agent, this is one long-lived process: from its second verification on, the
executor is a warm one (``toolchain/isolation/standby.py``). ``--cold`` turns warm workers off (every worker
is started by the call that uses it, as in a one-shot ``nki-agent verify``). Revisions older than warm workers
ignore the setting. Without bytecode for the project's modules (``scripts/install.sh`` compiles it; an
editable install alone does not, and neither does a machine with ``PYTHONDONTWRITEBYTECODE``) every jailed
worker compiles them at start: compare revisions installed the same way.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _median_time(fn: object, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--examples", default=str(ROOT / "examples"))
    ap.add_argument("--filter", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--cold", action="store_true", help="no warm workers (NKI_AGENT_WARM_WORKERS=0)")
    args = ap.parse_args()
    if args.cold:
        import os

        os.environ["NKI_AGENT_WARM_WORKERS"] = "0"
    from nki_agent.toolchain import api

    kernels = sorted(k for k in Path(args.examples).glob("*/kernel_*.py") if args.filter in str(k))
    rows = []
    for k in kernels:
        task = str(k.parent / "task.py")

        def verify() -> None:
            r = api.verify(str(k), task, seeds=args.seeds, timeout=300.0)
            assert r.correct, (k, r.problems)

        def simulate() -> None:
            r = api.simulate(str(k), task, timeout=300.0)
            assert not [p for p in r.problems if p.severity == "error"], (k, r.problems)

        v, s = _median_time(verify, args.repeat), _median_time(simulate, args.repeat)
        rows.append({"kernel": f"{k.parent.name}/{k.name}", "verify_s": round(v, 3), "simulate_s": round(s, 3)})
        print(f"{rows[-1]['kernel']:48s} verify {v:6.2f}s  simulate {s:6.2f}s", flush=True)
    summary = {"kernels": len(rows), "cold": args.cold, "median_verify_s": statistics.median(r["verify_s"] for r in rows),
               "median_simulate_s": statistics.median(r["simulate_s"] for r in rows)}
    print(json.dumps(summary))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
