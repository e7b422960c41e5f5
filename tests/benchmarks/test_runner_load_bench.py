"""``benchmarks/runner_load.py`` in small mode (12 jobs, 1 and 2 workers), so the script keeps working.

It runs the script as a user would (a subprocess with ``--json``) against the real runner it starts
on 127.0.0.1, and checks the script's own verdicts and the shape of its figures — never their values:
the machine may be loaded.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "runner_load.py"
JOBS = 12


def test_help_describes_the_figures() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=120,
                          check=False, cwd=str(ROOT))
    assert done.returncode == 0, done.stderr
    for option in ("--jobs", "--workers", "--seeds", "--streams", "--json"):
        assert option in done.stdout


def test_small_load_loses_nothing_with_one_and_two_workers(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--jobs", str(JOBS), "--workers", "1,2", "--json", str(out)],
                          capture_output=True, text=True, timeout=1200, check=False, cwd=str(ROOT))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["jobs"] == JOBS
    runs = figures["runs"]
    assert [r["workers"] for r in runs] == [1, 2]
    for r in runs:
        assert r["ok"] and not r["problems"], r
        assert r["accepted"] == r["collected"] == r["done_correct"] == r["stored"] == r["distinct_nonces"] == JOBS
        assert r["lost"] == 0
        assert r["throughput_jobs_s"] and r["throughput_jobs_s"] > 0
        for key in ("overhead_p50_ms", "overhead_p99_ms", "backend_p50_s", "latency_p99_s", "submit_p99_ms"):
            assert math.isfinite(r[key]), (key, r)
        assert r["overhead_p50_ms"] <= r["overhead_p99_ms"]
    assert "jobs/s" in done.stdout and "overhead p50" in done.stdout
