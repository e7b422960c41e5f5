"""One-shot commands start no warm executor (it would only be stopped at exit); looping ones keep the default."""

from __future__ import annotations

import sys

import pytest

import nki_agent.cli as cli
from nki_agent.cli import app
from nki_agent.toolchain.isolation import standby


@pytest.mark.parametrize(("argv", "warm"), [
    (["verify", "k.py", "--task", "t.py"], "0"), (["--json", "simulate", "k.py"], "0"), (["check", "k.py"], "0"),
    (["fix", "k.py"], None), (["watch", "."], None), (["lsp"], None), (["runner", "serve"], None),
])
def test_one_shot_commands_turn_warm_workers_off(argv: list[str], warm: str | None,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(standby.ENV, raising=False)
    monkeypatch.setattr(sys, "argv", ["nki-agent", *argv])
    seen: list[str | None] = []
    monkeypatch.setattr(app, "run", lambda: seen.append(__import__("os").environ.get(standby.ENV)))
    cli.main()
    assert seen == [warm]


def test_a_users_own_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(standby.ENV, "1")
    monkeypatch.setattr(sys, "argv", ["nki-agent", "verify", "k.py"])
    seen: list[str | None] = []
    monkeypatch.setattr(app, "run", lambda: seen.append(__import__("os").environ.get(standby.ENV)))
    cli.main()
    assert seen == ["1"]
