"""``nki-agent fix`` and ``nki-agent export-sft`` as a user runs them (a real subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fakes import Call, FakeOpenAI, ToolUse

ROOT = Path(__file__).resolve().parents[2]
BROKEN = ROOT / "tests" / "fixtures" / "quickfix" / "bool_and.py"
ENV = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nki_agent", *args], capture_output=True, text=True, env=ENV,
                          timeout=300, cwd=ROOT)


def test_fix_apply_then_export_sft(tmp_path: Path) -> None:
    kernel = tmp_path / "kernel.py"
    kernel.write_text(BROKEN.read_text())
    traj = tmp_path / "traj"
    proc = _cli("fix", str(kernel), "--apply", "--json", "--trajectory-dir", str(traj))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["verdict"] == "verified" and out["applied"] is True and out["dollars"] == 0
    assert out["sandbox"] == "bwrap" and out["refused"] is False
    assert "m = hi & lo" in kernel.read_text()
    records = [json.loads(line) for f in traj.glob("*.jsonl") for line in f.read_text().splitlines()]
    assert [r["sandbox"] for r in records if r["type"] == "verdict"] == ["bwrap"]  # which sandbox verified it
    ran = [r["sandbox"] for r in records if r["type"] == "tool" and r["name"] == "verify" and r["sandbox"]]
    assert ran and set(ran) == {"bwrap"}  # (a verify refused before it ran has none)
    sft = tmp_path / "sft.jsonl"
    proc = _cli("export-sft", "--dir", str(traj), "-o", str(sft))
    assert proc.returncode == 0 and "1 example" in proc.stdout
    (example,) = [json.loads(line) for line in sft.read_text().splitlines()]
    roles = [m["role"] for m in example["messages"]]
    assert roles[:2] == ["system", "user"] and "assistant" in roles and "tool" in roles
    assert {t["function"]["name"] for t in example["tools"]} == {"compile", "verify", "profile", "lookup"}


def test_fix_without_apply_leaves_the_file_alone_and_is_not_exported(tmp_path: Path) -> None:
    kernel = tmp_path / "kernel.py"
    kernel.write_text(BROKEN.read_text())
    traj = tmp_path / "traj"
    proc = _cli("fix", str(kernel), "--trajectory-dir", str(traj))
    assert proc.returncode == 0 and "not applied (use --apply)" in proc.stdout
    assert "+    m = hi & lo" in proc.stdout  # the diff is shown
    assert kernel.read_text() == BROKEN.read_text()
    proc = _cli("export-sft", "--dir", str(traj), "-o", str(tmp_path / "sft.jsonl"))
    assert "0 example(s); skipped 1" in proc.stdout


def test_fix_with_an_openai_compatible_model(tmp_path: Path) -> None:
    kernel = tmp_path / "kernel.py"
    kernel.write_text(BROKEN.read_text())
    with FakeOpenAI([ToolUse([Call("verify", {"edits": [{"old": "hi and lo", "new": "hi & lo"}]})])]) as fake:
        proc = _cli("fix", str(kernel), "--model", f"openai:qwen3-coder-nki@{fake.base_url}", "--json",
                    "--no-trajectory")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["verdict"] == "verified" and len(fake.bodies) == 1


def test_clear_errors(tmp_path: Path) -> None:
    lonely = tmp_path / "lonely.py"
    lonely.write_text("import nki\n")
    proc = _cli("fix", str(lonely), "--no-trajectory")
    assert proc.returncode == 2 and "no task" in proc.stdout
    proc = _cli("fix", str(BROKEN), "--model", "gpt:whatever", "--no-trajectory")
    assert proc.returncode == 2 and "unknown backend" in proc.stdout + proc.stderr
    proc = _cli("fix", str(tmp_path / "missing.py"), "--no-trajectory")
    assert proc.returncode == 2 and "cannot read" in proc.stdout
