"""The hover coverage benchmark (``benchmarks/hover_coverage.py``) in its small mode: it drives the real server
over our own kernels and reports every kind of hover it asked for; none of them may be empty, and every ``?``
in a tile's shape must come from a kernel input of unknown shape (the goal the benchmark reports)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_hover_coverage_small_mode(tmp_path: Path) -> None:
    out = tmp_path / "hover_coverage.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "hover_coverage.py"), "--small", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    (report,) = json.loads(out.read_text())
    assert report["files"] >= 3 and report["kernels"] >= 3
    assert {"call", "api", "tile", "param"} <= set(report["requested"]), report["requested"]
    assert report["empty"] == {}, report["examples_empty"]
    assert report["unknown"] == report["unknown_from_input"], report["examples_unknown"]
    assert report["hints"] > 0
    assert "goal: 0 % empty" in done.stdout
