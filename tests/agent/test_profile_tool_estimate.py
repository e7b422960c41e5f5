"""The agent's profile tool without a Trainium runner: the embedded simulator's verdict and the cost model's
estimate, labelled estimated (never presented as a measurement), through the sandbox."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from nki_agent.agent.tools import ToolBox

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("isolate", [True, False], ids=["jailed", "in-process"])
def test_profile_tool_reports_the_estimate(tmp_path: Path, isolate: bool) -> None:
    src = ROOT / "examples" / "l2_matmul"
    kernel = tmp_path / "kernel.py"
    shutil.copy(src / "kernel_classic.py", kernel)
    tools = ToolBox(str(kernel), kernel.read_text(), str(src / "task.py"), isolate=isolate, seeds=1)
    out = tools.profile()
    assert out.ran == "profile"
    text = out.content
    assert "embedded simulator" in text and "correct" in text
    assert "est." in text and "estimated, not measured" in text and "measured on" not in text
    assert "-bound" in text and "line " in text and "loop `" in text
    assert out.result is not None and out.result.latency.kind == "estimated"
    assert out.result.estimate is not None and out.result.latency.p50_us == out.result.estimate.latency_us
