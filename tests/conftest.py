"""Shared fixtures: paths of the repository, the examples and the fixture kernels; the run's header says
whether this machine's jail works (``jail.status()``, the probe the tools and the security suite use) and
which per-job cgroup it gets (``jail_cgroup.host()``), so a skipped or fallback run is visible."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLES = ROOT / "examples"


def pytest_report_header(config: pytest.Config) -> list[str]:
    from nki_agent.toolchain.isolation import jail, jail_cgroup

    state, group = jail.status(), jail_cgroup.host()
    where = f"bwrap {state.binary}" if state.available else f"UNAVAILABLE ({state.reason})"
    limits = f"cgroup {group.mode}" if group.available else f"fallback rlimits ({group.reason})"
    return [f"nki-agent jail: {where}; per-job limits: {limits}"]


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
