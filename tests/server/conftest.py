"""Fixtures for the language-server tests: a real ``python -m nki_agent.server`` process (pytest-lsp).

``client`` is an initialized session. Most tests get a server of their own; the tests listed in ``SHARED``
only open documents of their own (URIs under their ``tmp_path``) and read what the server answers, so they
share one server per module (per xdist worker). Each still starts from a clean client view — the publishes,
messages, progress reports and lens refreshes recorded before it are dropped, the settings are the
defaults again if an earlier test changed them — and every document it opened is closed when it ends, so
nothing of it is left in the server. A test that counts the server's global stats from zero, opens a file
of the repository (a URI another test may open too), registers client features or needs its own settings
at start keeps a server of its own.

``bare_client`` is not initialized: the test starts the session itself (settings tests).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
import pytest_lsp
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, LanguageClient
from server_helpers import SERVER, SERVER_ENV, record_publishes, start

OPTIONS = {"nkiAgent": {"debounceMs": 20, "simulateOnSave": True}}

# module -> the tests of it (by function name, parameters aside) that share the module's server; None: all
# of its tests that use ``client``
SHARED: dict[str, frozenset[str] | None] = {
    "test_run_quickfix_lsp.py": None,  # data-driven: one server for all the rows (each configures its tier)
    "test_taskless_lsp.py": None,
    "test_kernel_report_lsp.py": None,
    "test_hover_facts_lsp.py": None,
    "test_task_missing_lsp.py": None,
    "test_task_target_lsp.py": None,
    "test_taskless_cut_off_lsp.py": None,
    "test_runnables_lsp.py": None,
    "test_editor_findings_lsp.py": None,
    "test_e2e.py": frozenset({
        "test_diagnostics_after_open_and_change", "test_stale_results_are_never_published",
        "test_simulation_problems_published_as_nki_sim", "test_inlay_hint_loop_trip_count",
        "test_quick_fix_applies_and_diagnostic_disappears", "test_non_ascii_positions",
        "test_huge_document_gets_one_info_diagnostic"}),
}


def _shares(item: pytest.Item) -> bool:
    if "client" not in getattr(item, "fixturenames", ()) or item.path.parent.name != "server":
        return False
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}).get("client", ())
    if not defs or getattr(defs[-1].func, "__module__", None) != __name__:
        return False  # the module's own ``client`` (another server command or session), not this one
    names = SHARED.get(item.path.name, frozenset())
    return names is None or getattr(item, "originalname", item.name) in names


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # a shared server lives in the module's event loop: its tests run in that loop too
    for item in items:
        if _shares(item) and item.get_closest_marker("asyncio") is not None:
            item.add_marker(pytest.mark.asyncio(loop_scope="module"), append=False)  # before its own mark


@pytest.fixture
def client(request: pytest.FixtureRequest) -> Iterator[LanguageClient]:
    """An initialized session: the module's shared server (``SHARED``) or a server of the test's own."""
    yield request.getfixturevalue("_shared_client" if _shares(request.node) else "_own_client")


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, server_env=SERVER_ENV))
async def _own_client(lsp_client: LanguageClient):
    await start(lsp_client, OPTIONS)
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(scope="module", config=ClientServerConfig(server_command=SERVER, server_env=SERVER_ENV))
async def _module_server(lsp_client: LanguageClient):
    await start(lsp_client, OPTIONS)
    opened: list[str] = []
    did_open, did_change_configuration = lsp_client.text_document_did_open, lsp_client.workspace_did_change_configuration

    def track_open(params: T.DidOpenTextDocumentParams) -> None:
        opened.append(params.text_document.uri)
        did_open(params)

    def track_configuration(params: T.DidChangeConfigurationParams) -> None:
        lsp_client.configured = True  # type: ignore[attr-defined]
        did_change_configuration(params)

    lsp_client.text_document_did_open = track_open  # type: ignore[method-assign]
    lsp_client.workspace_did_change_configuration = track_configuration  # type: ignore[method-assign]
    lsp_client.opened = opened  # type: ignore[attr-defined]
    lsp_client.configured = False  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


@pytest_asyncio.fixture(loop_scope="module")
async def _shared_client(_module_server: LanguageClient) -> AsyncIterator[LanguageClient]:
    lsp: Any = _module_server
    if lsp.configured:  # an earlier test changed the settings: back to the session's own
        lsp.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings=OPTIONS))
        lsp.configured = False
    await lsp.protocol.send_request_async("nki/stats", {})  # the server has taken all of the above in
    lsp.published = []
    lsp.messages.clear()
    lsp.progress_reports.clear()
    lsp.lens_refreshes = 0
    yield lsp
    for uri in dict.fromkeys(lsp.opened):
        lsp.text_document_did_close(T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(uri)))
    lsp.opened.clear()
    await lsp.protocol.send_request_async("nki/stats", {})  # every close is handled before the next test


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, server_env=SERVER_ENV))
async def bare_client(lsp_client: LanguageClient):
    """Not initialized: the test starts the session itself (settings tests)."""
    record_publishes(lsp_client)
    yield
    await lsp_client.shutdown_session()
