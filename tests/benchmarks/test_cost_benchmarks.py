"""The cost model's benchmarks run from the repo (small modes): ground truth on small tasks, and what
estimating costs on top of simulating."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ground_truth_benchmark_small_mode(tmp_path: Path) -> None:
    out = tmp_path / "gt.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cost_ground_truth.py"), "--small",
                           "--filter", "matmul", "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    ids = [r["id"] for r in data["rows"]]
    assert ids == ["matmul_v1_tiled", "matmul_v2_hoisted", "matmul_v3_block_free", "matmul_v4_optimized"]
    for r in data["rows"]:
        assert r["ran"] and r["predicted_us"] > 0 and r["default_us"] > 0 and r["instructions"] > 0
        assert r["calibration"].startswith("packaged")
    assert "rank order matmul" in done.stdout


def test_overhead_benchmark_runs(tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cost_overhead.py"), "--repeat", "1",
                           "--filter", "l1_add", "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    assert len(data["rows"]) == 2 and data["median_ratio"] > 0
    assert "median estimated/plain" in done.stdout
