"""``nki-agent check`` applies the target ``verify`` runs the file on (``resolve_target``): ``--target``, the
task's ``TARGET``, the environment, then the API generation's default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from nki_agent.cli import check
from nki_agent.toolchain.judging.verify import verify_files

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NEW = FIXTURES / "targets" / "new_api_bf16_psum.py"  # new API, no TARGET: trn3
DECLARED = FIXTURES / "static" / "matmul_psum_dtype_bad.py"  # the same mistake, TARGET = "trn1"

app = typer.Typer()
app.command("check")(check.command)
app.command("unused")(lambda: None)  # two commands: ``check`` is invoked by name


@pytest.mark.parametrize("path,args,env,codes", [
    (NEW, [], {}, []),
    (NEW, ["--target", "trn1"], {}, ["sim_unsupported_dtype"]),
    (NEW, [], {"NKI_AGENT_TARGET": "trn1"}, ["sim_unsupported_dtype"]),
    (DECLARED, [], {}, ["sim_unsupported_dtype"]),
    (DECLARED, ["--target", "trn3"], {}, []),
], ids=["new-api-default", "flag", "environment", "task-target", "flag-over-task"])
def test_check_uses_the_target_verify_uses(path: Path, args: list[str], env: dict[str, str], codes: list[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NKI_AGENT_TARGET", "NEURON_PLATFORM_TARGET_OVERRIDE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    r = CliRunner().invoke(app, ["check", str(path), "--json", *args])
    assert [d["code"] for d in json.loads(r.stdout)["diagnostics"]] == codes, r.stdout
    assert r.exit_code == (1 if codes else 0)


def test_verify_runs_the_new_api_file_on_trn3(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NKI_AGENT_TARGET", "NEURON_PLATFORM_TARGET_OVERRIDE"):
        monkeypatch.delenv(name, raising=False)
    res = verify_files(str(NEW), str(NEW), seeds=1)
    assert res.target == "trn3" and res.correct, res.problems
