"""Issue 14's acceptance in a real VS Code: code-server with the built ``dist/nki-agent-<version>.vsix``
installed, driven by playwright in Debian's Chromium (vscode_e2e_harness.py). Each scenario has its own
code-server, user-data dir (settings written before start) and workspace; one Chromium serves the
module. Screenshots go to ``.cache/e2e-artifacts/<test>/`` (printed by each test).

Skipped, with the reason, only when scripts/install_vscode_e2e.sh could not install the prerequisites
(no apt, no network). Default mode runs the editor scenarios and the cheap bad setups; the Install-button
setup (pip installs the package and its dependencies into a fresh venv) runs with NKI_AGENT_E2E_FULL=1.
Memory: one code-server session is about 1.2 GB with its extension host, language server and Chromium;
with ``-n 2`` at most two run at once."""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from vscode_e2e_harness import (ROOT, SLOW_TIMEOUT_MS, UI_TIMEOUT_MS, VENV_PYTHON, CodeServer, Workbench,
                                artifacts_dir, install_extension, launch_browser, start_code_server,
                                unavailable_reason)

REASON = unavailable_reason()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(REASON is not None, reason=REASON or "")]
FULL = os.environ.get("NKI_AGENT_E2E_FULL") == "1"
QUICKFIX = ROOT / "tests" / "fixtures" / "quickfix"
EXAMPLE = ROOT / "examples" / "l1_add"

Opener = Callable[..., Workbench]


@pytest.fixture(scope="module")
def extensions_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("vscode-ext")
    install_extension(base / "extensions", base / "home")
    return base / "extensions"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        b = launch_browser(pw)
        yield b
        b.close()


@pytest.fixture
def vscode(request: pytest.FixtureRequest, tmp_path: Path, extensions_dir: Path, browser: Any) -> Iterator[Opener]:
    """``vscode(files, settings)``: a workspace with ``files`` (name -> text), a fresh code-server with the
    user ``settings``, and a workbench page on it. Stopped (and screenshotted) at the end of the test."""
    shots = artifacts_dir(request.node.name)
    servers: list[CodeServer] = []
    benches: list[Workbench] = []

    def open_(files: dict[str, str], settings: dict[str, Any], env: dict[str, str] | None = None) -> Workbench:
        ws = tmp_path / "ws"
        ws.mkdir()
        for name, text in files.items():
            (ws / name).write_text(text)
        server = start_code_server(tmp_path / "home", extensions_dir, settings, env)
        servers.append(server)
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        bench = Workbench(context.new_page(), shots)
        benches.append(bench)
        bench.open(server, ws)
        return bench

    yield open_
    for bench in benches:
        try:
            bench.shot("final")
        finally:
            bench.page.context.close()
    for server in servers:
        shutil.copy(server.log, shots / "code-server.log")
        server.stop()


def _settings(**extra: Any) -> dict[str, Any]:
    return {"nkiAgent.interpreter": str(VENV_PYTHON), **extra}


def _fixture(name: str) -> dict[str, str]:
    return {"kernel.py": (QUICKFIX / name).read_text()}


def test_problems_panel_shows_the_kernels_diagnostic(vscode: Opener) -> None:
    wb = vscode(_fixture("bool_and.py"), _settings())
    wb.open_file("kernel.py")
    rows = wb.problems("err_ambiguous_tensor_truth_value")
    wb.shot("problems")
    assert any("needs a single truth value" in r for r in rows), rows
