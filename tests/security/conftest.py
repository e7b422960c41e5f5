"""Fixtures of the security tests: the subreaper, the tool process, one scene per test, the language server, the runner."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from security_helpers import (
    SECRET_VARS,
    SERVER_SIM_TIMEOUT,
    TOOLS,
    Harness,
    LspServer,
    Scene,
    jail_works,
    make_canary,
    reap,
    set_subreaper,
)
from security_runner import RunnerWorld


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "skip_allowed: a security test that may skip on a machine where the jail "
                                       "works (its precondition is not about the jail)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Where this machine's jail works (``jail.status()``), a security test that skips is a failure: the
    hostile suite exists to run here, and a skip would hide that it did not."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    allowed = item.get_closest_marker("skip_allowed") is not None
    if report.skipped and not allowed and not hasattr(report, "wasxfail") and jail_works():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"a security test skipped although this machine's jail works (jail.status()): {reason}"


@pytest.fixture(scope="module", autouse=True)
def no_warm_workers() -> Iterator[None]:
    """The tools here (and their harness, server and runner processes) start no warm workers: a warm executor
    is started after a run, for the next job, by design, and the survivor check counts every process a run
    leaves behind. Hostile programs through a warm executor: ``tests/toolchain/test_standby.py``."""
    from nki_agent.toolchain.isolation import standby

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(standby.ENV, "0")
        yield


@pytest.fixture(scope="module", autouse=True)
def subreaper(no_warm_workers: None) -> Iterator[None]:
    """Every process a run orphans re-parents to this test process, so none escapes the survivor check."""
    set_subreaper(True)
    try:
        yield
    finally:
        set_subreaper(False)
        reap(TOOLS)


@pytest.fixture(scope="module")
def tool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    """The long-lived tool process (``harness.py``); a test whose kernel killed it gets a new one next time."""
    canary = make_canary()  # in the tool's initial environment, as an editor's API key would be
    env = {k: v for k, v in os.environ.items() if k not in SECRET_VARS}
    env.update({var: canary for var in SECRET_VARS})
    harness = Harness(tmp_path_factory.mktemp("harness") / "stderr.log", env)
    harness.canary = canary  # type: ignore[attr-defined]
    harness.start()
    try:
        yield harness
    finally:
        harness.close()
        TOOLS.discard(harness.pid)


@pytest.fixture
def scene(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tool: Harness) -> Iterator[Scene]:
    """This test's world; the secrets, the fake HOME and TMPDIR are also set in this process's environment
    (CLI subprocesses inherit them; the harness gets them per request, on top of its own initial canary)."""
    s = Scene(tmp_path)
    s.extra_canaries.append(tool.canary)  # type: ignore[attr-defined]
    for key, value in s.env().items():
        monkeypatch.setenv(key, value)
    try:
        yield s
    finally:
        s.cleanup(TOOLS)


class ServerWorld:
    """The module's language server and the folders it runs with (its canary is in its environment)."""

    def __init__(self, base: Path) -> None:
        self.canary = make_canary()
        self.home, self.cwd, self.tmp = base / "home", base / "cwd", base / "tmp"
        for d in (self.home / ".aws", self.cwd, self.tmp, base / "trajectories"):
            d.mkdir(parents=True, exist_ok=True)
        (self.home / ".aws" / "credentials").write_text(f"[default]\naws_secret_access_key = {self.canary}\n")
        env = {k: v for k, v in os.environ.items() if k not in SECRET_VARS}
        env.update({var: self.canary for var in SECRET_VARS})
        env.update(HOME=str(self.home), TMPDIR=str(self.tmp), NKI_AGENT_TRAJECTORY_DIR=str(base / "trajectories"),
                   NKI_AGENT_CHECK_HELPER="0")
        self.stderr = base / "server.stderr"
        self.server = LspServer(env, self.cwd, {"nkiAgent": {"verifyOnSave": True, "simulateOnSave": True,
                                                             "debounceMs": 20,
                                                             "simulationTimeout": SERVER_SIM_TIMEOUT}},
                                self.stderr)

    def scene(self, root: Path) -> Scene:
        s = Scene(root, canary=self.canary)
        s.extra_snapshots = [self.home, self.cwd]
        s.extra_tmps = [self.tmp]
        return s


@pytest.fixture(scope="module")
def server_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerWorld]:
    """One real language server for the whole module (restarted only if a kernel killed it)."""
    world = ServerWorld(tmp_path_factory.mktemp("server"))
    world.server.start()
    try:
        yield world
    finally:
        world.server.close()
        TOOLS.discard(world.server.pid)


@pytest.fixture
def server_scene(tmp_path: Path, server_world: ServerWorld) -> Iterator[Scene]:
    s = server_world.scene(tmp_path)
    try:
        yield s
    finally:
        s.cleanup(TOOLS)


@pytest.fixture(scope="module")
def runner_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunnerWorld]:
    """One real runner subprocess (``nki-agent runner serve`` on 127.0.0.1) for the module; restarted only
    if a kernel killed it."""
    world = RunnerWorld(tmp_path_factory.mktemp("runner"))
    world.ensure()
    try:
        yield world
    finally:
        world.runner.close()
        TOOLS.discard(world.runner.pid)


@pytest.fixture
def runner_scene(tmp_path: Path, runner_world: RunnerWorld) -> Iterator[Scene]:
    s = runner_world.scene(tmp_path)
    try:
        yield s
    finally:
        s.cleanup(TOOLS)
