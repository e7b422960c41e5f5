"""Fair scheduling across tokens (``runner/fair.py``, ``JobManager``): round robin, per-token caps.

Jobs run on ``StepBackend``: each holds its slot until the test releases it, and the backend logs the
order jobs started in. Assertions are on that order, never on wall time; waits are on conditions.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from nki_agent.runner.config import ConfigError, RunnerConfig
from nki_agent.runner.fair import Fair
from runner_fakes import StepBackend, auth, request, running

TOKEN = "s3cret-token-for-tests-0123456789"
OTHER = "second-user-token-abcdefgh"
THIRD = "third-user-token-abcdefghij"


def _tokens(tmp_path: Path) -> str:
    f = tmp_path / "tokens"
    f.write_text(f"{OTHER}\n{THIRD}\n")
    return str(f)


def test_fair_picks_fewest_running_then_round_robin() -> None:
    fair = Fair()
    for i in range(3):
        fair.push("a", f"a{i}")
    fair.push("b", "b0")
    fair.push("c", "c0")
    fair.push("c", "c1")
    order = [fair.pop() for _ in range(6)]
    assert [j for _, j in order if j] == ["a0", "b0", "c0", "a1", "c1", "a2"]
    assert fair.pop() is None and len(fair) == 0
    fair.done("a")
    assert fair.running == {"a": 2, "b": 1, "c": 2}


def test_fair_cap_leaves_a_tokens_jobs_queued() -> None:
    fair = Fair(cap=1)
    fair.push("a", "a0")
    fair.push("a", "a1")
    assert fair.pop() == ("a", "a0") and fair.pop() is None  # a1 waits although a slot may be free
    fair.push("b", "b0")
    assert fair.pop() == ("b", "b0")
    fair.done("a")
    assert fair.pop() == ("a", "a1")
    assert fair.remove("a", "a1") is False and len(fair) == 0


def test_a_second_tokens_job_starts_within_one_slot_turn(tmp_path: Path) -> None:
    """Measured before: one token's queue of slow jobs held the only slot while another token's job waited
    behind all of them (FIFO). Now it runs as soon as the running job ends."""
    step = StepBackend()
    with running(tmp_path, step, token=TOKEN, tokens_file=_tokens(tmp_path), workers=1, cache=False) as (_, client):
        for i in range(5):
            assert client.post("/v1/jobs", json=request(f"a{i}"), headers=auth(TOKEN)).status_code == 202
        assert step.wait_started(1)
        assert client.post("/v1/jobs", json=request("b0"), headers=auth(OTHER)).status_code == 202
        step.release("a0")
        assert step.wait_started(2)
        assert step.started() == ["a0", "b0"]  # not a1: the other token's turn
        step.release_all()
        assert step.wait_started(6)
        assert step.started() == ["a0", "b0", "a1", "a2", "a3", "a4"]


def test_three_tokens_take_turns(tmp_path: Path) -> None:
    step = StepBackend()
    with running(tmp_path, step, token=TOKEN, tokens_file=_tokens(tmp_path), workers=1, cache=False) as (_, client):
        assert client.post("/v1/jobs", json=request("hold"), headers=auth(THIRD)).status_code == 202
        assert step.wait_started(1)
        for owner, name in ((TOKEN, "a"), (OTHER, "b"), (THIRD, "c")):
            for i in range(2):
                assert client.post("/v1/jobs", json=request(f"{name}{i}"), headers=auth(owner)).status_code == 202
        step.release_all()
        assert step.wait_started(7)
        assert step.started() == ["hold", "a0", "b0", "c0", "a1", "b1", "c1"]


def test_running_per_token_keeps_a_slot_for_another_token(tmp_path: Path) -> None:
    step = StepBackend()
    with running(tmp_path, step, token=TOKEN, tokens_file=_tokens(tmp_path), workers=2, running_per_token=1,
                 cache=False) as (runner, client):
        for i in range(3):
            assert client.post("/v1/jobs", json=request(f"a{i}"), headers=auth(TOKEN)).status_code == 202
        assert step.wait_started(1)
        assert client.post("/v1/jobs", json=request("b0"), headers=auth(OTHER)).status_code == 202
        assert step.wait_started(2)
        assert step.started() == ["a0", "b0"]  # the second slot skipped a1 (queued first): its token runs one
        assert runner.manager.load() == {"queued": 2, "running": 2, "slots": 2}
        step.release_all()
        assert step.wait_started(4)
        assert step.started()[2:] == ["a1", "a2"]


def test_a_tokens_timeout_is_capped(tmp_path: Path) -> None:
    step = StepBackend()
    step.release_all()
    with running(tmp_path, step, max_timeout_s=30.0, cache=False) as (_, client):
        caps = client.get("/v1/capabilities").json()
        assert caps["limits"]["max_timeout_s"] == 30.0
        done = client.post("/v1/jobs?wait=60", json=request("long", timeout_s=900)).json()
        assert done["state"] == "done"
        assert any("capped at this runner's 30 s" in e["message"] for e in done["events"])
        short = client.post("/v1/jobs?wait=60", json=request("short", timeout_s=10)).json()
        assert all("capped" not in e["message"] for e in short["events"])
    assert [t for kind, _, t in step.log if kind == "start"] == [30.0, 10.0]
    assert [r.time_budget_s for r in step.requests] == [30.0, 30.0]  # the default 30 s budget is under the cap


@pytest.mark.parametrize("setting", [{"max_timeout_s": 0.5}, {"max_timeout_s": 901}, {"running_per_token": -1}])
def test_bad_fairness_settings_are_config_errors(tmp_path: Path, setting: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        RunnerConfig(state_dir=str(tmp_path / "s"), **setting).validate()  # type: ignore[arg-type]
