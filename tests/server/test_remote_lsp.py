"""End to end: save in the editor → the remote runner (simulator backend, a real process on 127.0.0.1)
→ ``nki-runner`` diagnostics at the first mismatch's line, the runner's verdict and latency in the code
lens and hover; a dead runner gives one message, not diagnostics; a stale result is never published."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, LanguageClient
from server_helpers import SERVER, SERVER_ENV, WORKSPACE, open_doc, start, wait_publish, status

pytestmark = pytest.mark.asyncio
TOKEN = "lsp-e2e-" + secrets.token_hex(12)


class RunnerProcess:
    """``nki-agent runner serve`` on 127.0.0.1 (any free port), ready once it prints its URL."""

    def __init__(self, state: Path) -> None:
        env = {**os.environ, "NKI_AGENT_RUNNER_TOKEN": TOKEN}
        self.proc = subprocess.Popen([sys.executable, "-m", "nki_agent", "runner", "serve", "--port", "0",
                                      "--state-dir", str(state), "--no-cache"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # blocks until the runner listens (or dies: empty line)
        assert "listening on " in line, line
        self.url = line.rsplit("listening on ", 1)[1].strip()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunnerProcess]:
    r = RunnerProcess(tmp_path_factory.mktemp("runner-state"))
    yield r
    r.stop()


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("token") / "runner.token"
    p.write_text(TOKEN + "\n")
    return p


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, server_env=SERVER_ENV))
async def client(lsp_client: LanguageClient):
    yield lsp_client
    await lsp_client.shutdown_session()


def _messages(client: LanguageClient) -> list[str]:
    """window/showMessage texts so far (pytest-lsp records them)."""
    return [m.message for m in client.messages]


def _workspace(tmp_path: Path, wrong: bool) -> Path:
    folder = tmp_path / "add"
    shutil.copytree(WORKSPACE / "add", folder)
    kernel = folder / "kernel.py"
    if wrong:
        kernel.write_text(kernel.read_text().replace("nl.add(a_tile, b_tile", "nl.subtract(a_tile, b_tile"))
    return kernel


async def _save(client: LanguageClient, uri: str) -> None:
    client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri)))


async def _lenses(client: LanguageClient, uri: str, prefix: str, timeout: float = 120.0) -> list[str]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        lenses = await client.text_document_code_lens_async(T.CodeLensParams(T.TextDocumentIdentifier(uri)))
        titles = [lens.command.title for lens in lenses or [] if lens.command and status(lens)]
        if any(t.startswith(prefix) for t in titles):
            return titles
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no code lens starting with {prefix!r}")


async def test_save_sends_the_kernel_to_the_runner_and_shows_its_verdict(client, runner, token_file, tmp_path):
    kernel = _workspace(tmp_path, wrong=True)
    await start(client, {"nkiAgent": {"verifyOnSave": "remote", "runnerUrl": runner.url,
                                      "runnerTokenFile": str(token_file), "debounceMs": 20}})
    uri = open_doc(client, kernel)
    await wait_publish(client, uri, 1)
    await _save(client, uri)
    pub = await wait_publish(client, uri, 1, source="nki-runner", timeout=180)
    remote = [d for d in pub.diagnostics if d.source == "nki-runner"]
    assert remote[0].code == "sim_wrong_result"
    store_line = next(i for i, ln in enumerate(kernel.read_text().split("\n")) if "nl.store(out" in ln)
    assert remote[0].range.start.line == store_line  # the first mismatch's line, not the def
    titles = await _lenses(client, uri, "NKI runner:")
    assert any(t.startswith("NKI runner: ✗ wrong result") for t in titles), titles

    line = next(i for i, ln in enumerate(kernel.read_text().split("\n")) if ln.startswith("def add_kernel"))
    hover = await client.text_document_hover_async(T.HoverParams(T.TextDocumentIdentifier(uri),
                                                                 T.Position(line, 6)))
    md = hover.contents.value  # type: ignore[union-attr]
    assert "remote runner" in md and "wrong result" in md and runner.url in md
    runner_md = md[md.index("remote runner"):]
    # the simulator backend times nothing: its latency is the cost model's estimate, and says so
    assert "| latency | ≈ " in runner_md and " est. " in runner_md and "measured" not in runner_md


async def test_a_correct_kernel_gets_a_green_runner_lens(client, runner, token_file, tmp_path):
    kernel = _workspace(tmp_path, wrong=False)
    await start(client, {"nkiAgent": {"verifyOnSave": "remote", "runnerUrl": runner.url,
                                      "runnerTokenFile": str(token_file)}})
    uri = open_doc(client, kernel)
    await wait_publish(client, uri, 1)
    await _save(client, uri)
    titles = await _lenses(client, uri, "NKI runner: ✓")
    assert any(t.startswith("NKI runner: ✓ correct") for t in titles), titles
    assert not [m for m in _messages(client) if "runner" in m.lower()]


async def test_a_dead_runner_gives_one_message_and_no_squiggles(client, token_file, tmp_path):
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kernel = _workspace(tmp_path, wrong=False)
    await start(client, {"nkiAgent": {"verifyOnSave": "remote", "runnerUrl": f"http://127.0.0.1:{port}",
                                      "runnerTokenFile": str(token_file)}})
    uri = open_doc(client, kernel)
    await wait_publish(client, uri, 1)
    for _ in range(3):
        await _save(client, uri)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    while loop.time() < deadline and not _messages(client):
        await asyncio.sleep(0.05)
    # the local verification still runs and reports; then look at everything published
    await wait_publish(client, uri, 1, source=None)
    stats = None
    while loop.time() < deadline:
        stats = await client.protocol.send_request_async("nki/stats", {})
        if stats.sim_runs >= 1:  # the last save's local verification (a save cancels the runs of the one before)
            break
        await asyncio.sleep(0.05)
    msgs = [m for m in _messages(client) if "127.0.0.1" in m]
    assert len(msgs) == 1, _messages(client)
    assert "retries on the next save" in msgs[0] and TOKEN not in msgs[0]
    for p in client.published:  # type: ignore[attr-defined]
        assert not [d for d in p.diagnostics if d.source == "nki-runner"]


async def test_wrong_token_is_one_clear_message(client, runner, tmp_path):
    bad = tmp_path / "bad.token"
    bad.write_text("not-the-token-of-this-runner\n")
    kernel = _workspace(tmp_path, wrong=False)
    await start(client, {"nkiAgent": {"verifyOnSave": "remote", "runnerUrl": runner.url,
                                      "runnerTokenFile": str(bad)}})
    uri = open_doc(client, kernel)
    await wait_publish(client, uri, 1)
    await _save(client, uri)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    while loop.time() < deadline and not _messages(client):
        await asyncio.sleep(0.05)
    assert any("wrong or missing token" in m for m in _messages(client)), _messages(client)
    assert not any("not-the-token" in m for m in _messages(client))
