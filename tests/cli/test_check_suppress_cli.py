"""``nki-agent check``: ``# nki: ignore`` comments, per-code severity (``--severity`` over ``[tool.nki-agent]``
in pyproject.toml) in JSON and SARIF, and ``--fix`` applying every verified fix (the cases and expected files
of ``tests/fixtures/fix_all/``, shared with the language-server tests)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from nki_agent.cli.app import app

FIX_ALL = Path(__file__).resolve().parents[1] / "fixtures" / "fix_all"
CASES = json.loads((FIX_ALL / "suppress_cases.json").read_text())["cases"]
SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note", "hint": "note"}


def case_text(case: dict[str, Any]) -> str:
    """three_fixes.py with the case's comments added."""
    lines = (FIX_ALL / "three_fixes.py").read_text().split("\n")
    for n, extra in case.get("append", {}).items():
        lines[int(n) - 1] += extra
    for n, extra in sorted(case.get("insert", {}).items(), key=lambda kv: -int(kv[0])):
        lines.insert(int(n) - 1, extra)
    return "\n".join(lines)


def write_case(tmp_path: Path, case: dict[str, Any]) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    if "pyproject" in case:
        table = "\n".join(f'{k} = "{v}"' for k, v in case["pyproject"].items())
        (folder / "pyproject.toml").write_text(f"[tool.nki-agent.severity]\n{table}\n")
    kernel = folder / "kernel.py"
    kernel.write_text(case_text(case))
    return kernel


def check(*args: str) -> Any:
    res = CliRunner().invoke(app, ["check", *args], catch_exceptions=False)
    assert res.exit_code in (0, 1), res.output
    return res


def severity_args(case: dict[str, Any]) -> list[str]:
    return [a for level in case.get("severity", []) for a in ("--severity", level)]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_json_reports_what_the_comments_and_severities_leave(case: dict[str, Any], tmp_path: Path) -> None:
    kernel = write_case(tmp_path, case)
    res = check(str(kernel), "--format", "json", *severity_args(case))
    got = [[d["line"], d["code"], d["severity"]] for d in json.loads(res.stdout)["diagnostics"]]
    assert got == case["expect"]
    assert res.exit_code == (1 if any(e[2] == "error" for e in case["expect"]) else 0)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_sarif_reports_what_the_comments_and_severities_leave(case: dict[str, Any], tmp_path: Path) -> None:
    kernel = write_case(tmp_path, case)
    res = check(str(kernel), "--format", "sarif", *severity_args(case))
    results = json.loads(res.stdout)["runs"][0]["results"]
    got = [[r["locations"][0]["physicalLocation"]["region"]["startLine"], r["ruleId"], r["level"]] for r in results]
    assert got == [[line, code, SARIF_LEVEL[sev]] for line, code, sev in case["expect"]]


@pytest.mark.parametrize("bad", ["err_x", "err_x=loud", "=warning"])
def test_a_bad_severity_flag_is_a_usage_error(bad: str, tmp_path: Path) -> None:
    kernel = write_case(tmp_path, CASES[0])
    res = CliRunner().invoke(app, ["check", str(kernel), "--severity", bad])
    assert res.exit_code == 2 and "--severity" in res.output


@pytest.mark.parametrize("name", ["three_fixes", "one_ignored"])
def test_fix_applies_every_verified_fix_not_the_ignored_ones(name: str, tmp_path: Path) -> None:
    kernel = tmp_path / f"{name}.py"
    shutil.copy(FIX_ALL / f"{name}.py", kernel)
    res = check(str(kernel), "--fix", "--format", "json")
    assert kernel.read_text() == (FIX_ALL / f"{name}.fixed.py").read_text()
    report = json.loads(res.stdout)
    assert report["diagnostics"] == [] and res.exit_code == 0
    assert report["fixed"] == {str(kernel): 3 if name == "three_fixes" else 2}
