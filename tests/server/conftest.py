"""Fixtures for the language-server tests: a real ``python -m nki_agent.server`` process per test (pytest-lsp)."""

from __future__ import annotations

import pytest_lsp
from pytest_lsp import ClientServerConfig, LanguageClient
from server_helpers import SERVER, SERVER_ENV, record_publishes, start


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, server_env=SERVER_ENV))
async def client(lsp_client: LanguageClient):
    await start(lsp_client, {"nkiAgent": {"debounceMs": 20, "simulateOnSave": True}})
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, server_env=SERVER_ENV))
async def bare_client(lsp_client: LanguageClient):
    """Not initialized: the test starts the session itself (settings tests)."""
    record_publishes(lsp_client)
    yield
    await lsp_client.shutdown_session()
