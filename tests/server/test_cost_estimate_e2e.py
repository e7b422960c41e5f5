"""End to end with the real toolchain: save ``examples/l2_matmul/kernel_classic.py`` with verifyOnSave
local, and the cost model's estimate of the verification's first launch reaches the code lens, the loop
headers' hovers and inlay hints, and the kernel's hover. Skipped until the cost package
(``toolchain/cost/``) is installed; it then runs by itself."""

from __future__ import annotations

import importlib.util

import pytest
import pytest_lsp
from cost_helpers import EXAMPLE, K_LINE, KERNEL_LINE, M_LINE, N_LINE, Seen, col, cost_hints, hover, lenses
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, LanguageClient
from server_helpers import SERVER, SERVER_ENV, open_doc, start


def _cost_model_installed() -> bool:
    spec = importlib.util.find_spec("nki_agent.toolchain.cost")
    return spec is not None and spec.origin is not None  # a bare folder (namespace package) is not the package


pytestmark = [pytest.mark.asyncio, pytest.mark.slow,
              pytest.mark.skipif(not _cost_model_installed(), reason="the cost model (toolchain/cost) has not landed")]


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, server_env=SERVER_ENV))
async def client(lsp_client: LanguageClient):
    yield lsp_client
    await lsp_client.shutdown_session()


async def test_a_saved_kernel_shows_its_estimate(client: LanguageClient):
    path = EXAMPLE / "kernel_classic.py"
    text = path.read_text()
    await start(client, {"nkiAgent": {"debounceMs": 20, "verifyOnSave": "local"}})
    seen = Seen(client)
    uri = open_doc(client, path)
    await seen.until("publish", 1)
    client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri)))
    await seen.until("refresh", 1, timeout=300)
    [(line, title)] = await lenses(client, uri)
    assert line == KERNEL_LINE - 1 and title.startswith("NKI: ✓ verified on trn1")
    assert " · ≈ " in title and title.endswith(" est. trn1")
    hints = await cost_hints(client, uri, text)
    assert {M_LINE, N_LINE, K_LINE} <= set(hints), hints
    assert all(label.startswith("≈ ") and " · " in label for _, label, _ in hints.values())
    md = await hover(client, uri, M_LINE, col(text, M_LINE, "for"))
    assert md.startswith("this loop: ") and "of estimated time" in md and "4 trips (affine)" in md
    md = await hover(client, uri, KERNEL_LINE, col(text, KERNEL_LINE, "matmul_kernel"))
    assert md.startswith("**matmul_kernel** — cost model estimate") and "| engine | busy (est.) |" in md
