"""The VS Code extension's TypeScript unit tests (``node --test``, ``vscode`` faked), run from pytest so the
README's test command covers them: interpreter discovery, the Python version/import probe (against this
venv's Python and a fresh venv without the package), the crash-loop policy, debounced restarts, secrets
kept out of settings and logs, the runner probe, install, commands, and that the esbuild bundle loads.
Skipped only when ``node`` is absent; without ``node_modules`` it fails and says to run scripts/install.sh."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _node() -> str | None:
    return shutil.which("node")


@pytest.mark.skipif(_node() is None, reason="node is not installed (the extension's unit tests need Node >= 20)")
def test_extension_unit_tests(tmp_path: Path) -> None:
    node = _node()
    assert node is not None
    assert (ROOT / "node_modules" / ".bin" / "tsc").exists(), \
        "node_modules missing: run `bash scripts/install.sh` (npm ci) first"
    bare = tmp_path / "bare-venv"  # a Python >= 3.11 without nki_agent: the probe must say so
    venv.EnvBuilder(with_pip=False).create(bare)
    bare_python = bare / ("Scripts" if os.name == "nt" else "bin") / "python"
    env = {**os.environ, "NKI_AGENT_TEST_PYTHON": sys.executable, "NKI_AGENT_TEST_BARE_PYTHON": str(bare_python)}
    proc = subprocess.run([node, str(ROOT / "extension" / "run-tests.mjs"), "--out", str(tmp_path / "out")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    counts = {k: int(v) for k, v in re.findall(r"^# (pass|fail|skipped) (\d+)$", proc.stdout, re.M)}
    assert counts.get("fail") == 0, out[-8000:]
    assert counts.get("pass", 0) >= 40, out[-8000:]
    assert counts.get("skipped") == 0, out[-8000:]  # every test ran: both Pythons and the bundle were given
