"""Fixtures that start a real runner for one test, on 127.0.0.1 only, and stop it afterwards.

- ``runner_factory(stand_in=None, **settings) -> LiveRunner``: an in-process runner (``service.build``)
  served by uvicorn on a socket bound to 127.0.0.1 port 0, in a background thread; ``settings`` are
  ``RunnerConfig`` fields (``token=``, ``workers=``, ``backend=``, ``cache=`` ...), ``stand_in`` a backend
  object used instead of the configured one (e.g. a fake device that reports measured latencies).
  Several per test are fine. ``LiveRunner`` has ``url``, ``token``, ``service`` (``.manager``, ``.app``, ``.store``:
  the server's insides, for assertions) and ``client(**kw) -> RemoteRunner`` (closed at teardown).
- ``runner_url``: the URL of one in-process runner without a token (``runner_factory()``).
- ``runner_process``: ``nki-agent runner serve --port 0 --port-file F`` as a subprocess (token in its
  environment, not on its command line), ready once it printed "listening on URL";
  ``LiveProcess`` has ``url``, ``token``, ``proc``, ``port_file``, ``stderr_path``.
- ``dead_url``: a 127.0.0.1 URL whose port was bound and closed again (nothing listens there).

An in-process runner shares this process's ``toolchain.runner`` seam: its backend calls ``api.*``,
which ask ``runner.current()``. So a test that installs a ``RemoteRunner`` process-wide
(``runner.use``, an in-process CLI with ``--runner``, an in-process language server) must talk to
``runner_process`` (or run the client in a subprocess): with an in-process runner the jobs would
come back to the client and wait for themselves. Calling a ``RemoteRunner``'s methods directly
works with both.

Readiness is signalled, never slept for: the in-process server sets an event at the end of
uvicorn's ``startup()``, the subprocess is ready when its "listening on" line arrives (a bounded
``select`` on its stdout). Stopping: ``should_exit`` + join; SIGTERM (then SIGKILL) to the one
process the fixture started. Each runner has its own state folder under ``tmp_path``. Where the OS
jail does not work, the runners are started with ``unsafe_no_sandbox`` (tests only), as local tools
then fall back to unsandboxed workers.
"""

from __future__ import annotations

import os
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from nki_agent.runner import service
from nki_agent.runner.client import RemoteRunner
from nki_agent.runner.config import TOKEN_ENV, RunnerConfig
from nki_agent.toolchain.isolation import jail

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0  # a loaded machine may take a while to import FastAPI in a fresh process
TOKEN = "test-token-0123456789abcdef"


class _Server(uvicorn.Server):
    """uvicorn.Server that says when it listens (``ready``) instead of being polled for ``started``."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()


@dataclass
class LiveRunner:
    url: str
    token: str | None
    service: service.Runner
    config: RunnerConfig
    _clients: list[RemoteRunner] = field(default_factory=list)

    def client(self, **kw: Any) -> RemoteRunner:
        """A ``RemoteRunner`` for this runner (with its token unless ``token=`` is given)."""
        kw.setdefault("token", self.token or "")
        c = RemoteRunner(self.url, **kw)
        self._clients.append(c)
        return c


def _unsafe() -> bool:
    return not jail.status().available


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{host}:{port}"


@pytest.fixture
def runner_factory(tmp_path: Path) -> Iterator[Callable[..., LiveRunner]]:
    started: list[tuple[LiveRunner, _Server, threading.Thread]] = []

    def start(stand_in: Any = None, **settings: Any) -> LiveRunner:
        state = tmp_path / f"runner-{len(started)}"
        settings.setdefault("unsafe_no_sandbox", _unsafe())
        config = RunnerConfig(host="127.0.0.1", port=0, state_dir=str(state), **settings)
        svc = service.build(config, backend=stand_in)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        server = _Server(uvicorn.Config(svc.app, log_level="warning", access_log=False,
                                        timeout_graceful_shutdown=2))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="test-runner", daemon=True)
        thread.start()
        live = LiveRunner(_url(sock), config.token, svc, config)
        started.append((live, server, thread))
        if not server.ready.wait(START_TIMEOUT_S):
            pytest.fail("the in-process runner did not start listening")
        return live

    yield start
    for live, server, thread in reversed(started):
        for c in live._clients:
            c.close()
        server.should_exit = True
        thread.join(30)
        live.service.close()


@pytest.fixture
def runner_url(runner_factory: Callable[..., LiveRunner]) -> str:
    return runner_factory().url


@dataclass
class LiveProcess:
    url: str
    token: str | None
    proc: subprocess.Popen[str]
    port_file: Path
    stderr_path: Path


def _await_line(proc: subprocess.Popen[str], marker: str, timeout: float) -> str | None:
    """The first stdout line of ``proc`` that contains ``marker``, or None (exited or ``timeout``)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not sel.select(left):
                continue
            line = proc.stdout.readline()
            if not line:
                return None
            if marker in line:
                return line
    return None


@pytest.fixture
def runner_process(tmp_path: Path) -> Iterator[LiveProcess]:
    """``nki-agent runner serve`` in a subprocess, with ``TOKEN`` (see ``LiveProcess.token``)."""
    port_file, stderr_path = tmp_path / "runner.port", tmp_path / "runner.stderr"
    cmd = [sys.executable, "-m", "nki_agent", "runner", "serve", "--port", "0", "--port-file", str(port_file),
           "--state-dir", str(tmp_path / "runner-state")]
    if _unsafe():
        cmd.append("--unsafe-no-sandbox")
    env = dict(os.environ, **{TOKEN_ENV: TOKEN}, PYTHONUNBUFFERED="1")
    with open(stderr_path, "w") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                text=True, env=env)
    try:
        line = _await_line(proc, "listening on ", START_TIMEOUT_S)
        if line is None:
            pytest.fail(f"runner serve did not start (exit {proc.poll()}):\n{stderr_path.read_text()}")
        assert port_file.is_file(), "the port file is written before the listening line"
        yield LiveProcess(line.rsplit("listening on ", 1)[1].strip(), TOKEN, proc, port_file, stderr_path)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture
def dead_url() -> str:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    url = _url(sock)
    sock.close()
    return url
