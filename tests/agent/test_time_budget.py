"""The run's time budget bounds every sandboxed job, the first verification of the kernel as it is too."""

from __future__ import annotations

import re
from pathlib import Path

from agent_scripted import Scripted

from nki_agent.agent.loop import AgentConfig, run_agent
from nki_agent.agent.snapshot import Snapshot

ROOT = Path(__file__).resolve().parents[2]
LOOP = ROOT / "tests" / "fixtures" / "hostile" / "infinite_loop.py"


def test_the_first_verification_ends_within_the_runs_time_budget(tmp_path: Path) -> None:
    kernel = tmp_path / "kernel.py"
    text = LOOP.read_text()
    kernel.write_text(text)
    traj = tmp_path / "traj"
    res = run_agent(Snapshot(kernel.as_uri(), 1, text), str(kernel), str(kernel), Scripted([]),
                    AgentConfig(trajectory_dir=str(traj), max_seconds=4.0, tool_timeout=120.0), self_task=True)
    assert res.verdict != "verified"
    first = next(line for f in traj.glob("*.jsonl") for line in f.read_text().splitlines() if '"initial": true' in line)
    m = re.search(r"did not finish within ([0-9.]+) s", first)
    assert m is not None, first  # the job was killed by its deadline...
    assert float(m.group(1)) <= 4.0  # ...which came from the run's budget, not the 120 s tool timeout
