"""The loop with the real SDK backends against the fake API servers: budgets from real usage figures,
garbage from the API, and a model stream cut off mid-turn."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import Call, CutOff, FakeAnthropic, FakeOpenAI, FakeUsage, Garbage, ToolUse

from nki_agent.agent.backends.anthropic_backend import AnthropicBackend
from nki_agent.agent.backends.openai_backend import OpenAIBackend
from nki_agent.agent.loop import AgentConfig, run_agent
from nki_agent.agent.snapshot import Snapshot

ROOT = Path(__file__).resolve().parents[2]
ADD = ROOT / "examples" / "l1_add"
GOOD = (ADD / "kernel_new.py").read_text()
BUG = GOOD.replace("op=nl.add", "op=nl.subtract")


@pytest.fixture(autouse=True)
def _no_ambient_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)


def _run(tmp_path: Path, backend: object, **cfg: object):  # type: ignore[no-untyped-def]
    kernel = tmp_path / "kernel.py"
    kernel.write_text(BUG)
    return run_agent(Snapshot(kernel.as_uri(), 1, BUG), str(kernel), str(ADD / "task.py"), backend,  # type: ignore[arg-type]
                     AgentConfig(trajectory_dir=None, **cfg))  # type: ignore[arg-type]


def _backend(family: str, url: str) -> object:
    if family == "anthropic":
        return AnthropicBackend("claude-opus-4-8", api_key="test-key", base_url=url, backoff=0)
    return OpenAIBackend("nki-sft", base_url=url, backoff=0)


@pytest.mark.parametrize("family", ["anthropic", "openai"])
def test_token_budget_from_real_usage_figures(tmp_path: Path, family: str) -> None:
    fake_cls = FakeAnthropic if family == "anthropic" else FakeOpenAI
    wasteful = ToolUse([Call("verify", {"code": BUG})], usage=FakeUsage(input_tokens=150_000, output_tokens=1_000))
    with fake_cls([wasteful, wasteful, wasteful]) as fake:
        res = _run(tmp_path, _backend(family, fake.base_url), max_tokens=250_000)
    assert res.verdict == "budget" and "token budget" in res.reason
    assert res.turns == 2 and res.usage.input_tokens == 300_000 and len(fake.bodies) == 2


@pytest.mark.parametrize("family", ["anthropic", "openai"])
def test_garbage_from_the_api_is_a_clear_error(tmp_path: Path, family: str) -> None:
    fake_cls = FakeAnthropic if family == "anthropic" else FakeOpenAI
    with fake_cls([Garbage(b"\x00\x01 not json"), Garbage(b"<html>"), Garbage(b"{"), Garbage(b"]"),
                   Garbage(b"?"), Garbage(b"!")]) as fake:
        res = _run(tmp_path, _backend(family, fake.base_url))
    assert res.verdict == "error" and "failed" in res.reason and res.edit is None


def test_a_stream_cut_off_is_retried_then_the_fix_lands(tmp_path: Path) -> None:
    fix = ToolUse([Call("verify", {"edits": [{"old": "op=nl.subtract", "new": "op=nl.add"}]})])
    with FakeAnthropic([CutOff(fix, after=3), fix]) as fake:
        res = _run(tmp_path, _backend("anthropic", fake.base_url))
    assert res.verdict == "verified" and res.final_text == GOOD and len(fake.bodies) == 2
