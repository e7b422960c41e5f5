"""The library is mypy-clean (the configuration lives in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("mypy") is None and not (Path(sys.executable).parent / "mypy").exists(),
                    reason="mypy is installed by the dev extra")
def test_library_is_mypy_clean() -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy", "toolchain", "diagnostics", "nki_agent", "server", "agent",
                           "runner"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
