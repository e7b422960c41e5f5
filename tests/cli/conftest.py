"""Fixtures of the command-line tests: a private config folder (``NKI_AGENT_CONFIG_DIR``) for every test, and
the runner fixtures of ``tests/runner/conftest.py`` (``runner_factory``, ``dead_url``), loaded from that file
so there is one definition of how a test runner starts and stops."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from nki_agent.cli import measurements

_RUNNER_CONFTEST = Path(__file__).resolve().parents[1] / "runner" / "conftest.py"
_spec = importlib.util.spec_from_file_location("cli_tests_runner_fixtures", _RUNNER_CONFTEST)
assert _spec is not None and _spec.loader is not None
_runner_fixtures = sys.modules.setdefault(_spec.name, importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(_runner_fixtures)

runner_factory = _runner_fixtures.runner_factory
dead_url = _runner_fixtures.dead_url
LiveRunner = _runner_fixtures.LiveRunner


@pytest.fixture(autouse=True)
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own config folder (never the user's ~/.config/nki-agent)."""
    folder = tmp_path / "config"
    monkeypatch.setenv(measurements.CONFIG_ENV, str(folder))
    return folder
