"""Task-less self-forgery through ``nki-agent simulate KERNEL`` (a real subprocess, the product's jail): a kernel
file computing ``a - b`` beside an honest workspace test of ``a + b`` (``tests/fixtures/taskless/hostile/
self_forgery/``) whose ``__main__`` driver forges a passing test reply, or tampers with the test's files,
environment and pytest state, or whose import-time code tries to make the test pass. Never "passes" for the
failing test; what ran is the parent's word; every verdict is labelled "self-reported by the file"."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from nki_agent.toolchain.isolation import jail

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "taskless" / "hostile" / "self_forgery"
TOKEN = "selfforgery0token"
LABEL = "self-reported by the file"


def place(tmp_path: Path, fixture: str) -> Path:
    """The fixture as ``add_lib.py`` (placeholders filled in) and the honest test beside it."""
    text = (FIXTURES / f"{fixture}.py").read_text()
    (tmp_path / "add_lib.py").write_text(text.replace("{{USER_DIR}}", str(tmp_path)).replace("{{TOKEN}}", TOKEN))
    shutil.copy(FIXTURES / "add_lib_test_source.py", tmp_path / "test_add_lib.py")
    return tmp_path


def simulate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nki_agent", "simulate", "add_lib.py", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, check=False)


def both(cwd: Path) -> tuple[str, dict[str, Any]]:
    """The text output and the --json result of one fixture."""
    text = simulate(cwd)
    proc = simulate(cwd, "--json")
    try:
        return text.stdout + text.stderr, json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


def never_passes(out: str, res: dict[str, Any]) -> None:
    assert "passes" not in out and "passes" not in json.dumps(res), out
    assert res["self_reported"] is True, res
    if "verdict:" in out:
        assert LABEL in out.split("verdict:", 1)[1], out


def test_a_driver_forging_a_passing_test_reply_is_its_own_driver(tmp_path: Path) -> None:
    out, res = both(place(tmp_path, "forge_test_verdict"))
    never_passes(out, res)
    assert res["via"] == "main" and res["via_test"] == "" and "test_add_lib" not in out, out
    assert f"verdict: ran, nothing checked — {LABEL}" in out, out


@pytest.mark.skipif(not jail.status().available, reason="the product's jail does not start here (unsandboxed runs "
                    "may write the workspace: nothing to contain)")
def test_a_driver_tampering_with_the_tests_state_does_not_change_its_outcome(tmp_path: Path) -> None:
    folder = place(tmp_path, "tamper_test_state")
    before = sorted(p.name for p in folder.iterdir())
    kernel = (folder / "add_lib.py").read_text()
    out, res = both(folder)
    never_passes(out, res)
    assert res["via"] == "test" and res["via_test"] == "test_add_lib.py::test_add", res
    assert res["tried"] == ["__main__ launched no kernel of this file"]
    codes = [d["code"] for d in res["diagnostics"] if d["severity"] == "error"]
    assert codes == ["sim_wrong_result"] and res["diagnostics"][0]["path"].endswith("test_add_lib.py"), res
    assert f"verdict: failed ({LABEL})" in out
    assert sorted(p.name for p in folder.iterdir()) == before and (folder / "add_lib.py").read_text() == kernel
    assert simulate(folder).returncode == 1


@pytest.mark.parametrize("fixture", ["rig_at_import", "forge_at_import"])
def test_import_time_code_cannot_make_the_test_pass_unlabelled(tmp_path: Path, fixture: str) -> None:
    out, res = both(place(tmp_path, fixture))
    never_passes(out, res)
    assert res["via"] == "test" and res["via_test"] == "test_add_lib.py::test_add", res
    assert res["kernel"] == "add_lib.py"  # the parent's, not the forged reply's
    if not any(d["severity"] == "error" for d in res["diagnostics"]):  # the rigging "worked": the file's own word
        assert f"verdict: the test's worker reported a pass — {LABEL} (the test imports it)" in out, out
