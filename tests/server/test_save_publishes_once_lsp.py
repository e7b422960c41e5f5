"""A save publishes once: the run's diagnostics; the rank-aware static re-check that follows a run with
known inputs publishes again only when it finds something new."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from lsprotocol import types as T
from pytest_lsp import LanguageClient
from server_helpers import ROOT, open_doc, wait_publish

pytestmark = pytest.mark.asyncio

EXAMPLE = ROOT / "examples" / "l1_add"


async def _stats(client: LanguageClient) -> T.LSPAny:
    return await client.protocol.send_request_async("nki/stats", {})


async def _until(client: LanguageClient, done) -> None:  # type: ignore[no-untyped-def]
    for _ in range(2400):  # polled while the sandboxed run works (a loaded machine may take a while)
        if done(await _stats(client)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the server did not get there")


@pytest.mark.parametrize("kernel", ["kernel_classic.py", "kernel_new.py"])
async def test_a_save_publishes_the_run_once(client: LanguageClient, tmp_path: Path, kernel: str) -> None:
    shutil.copy(EXAMPLE / "task.py", tmp_path / "task.py")
    shutil.copy(EXAMPLE / kernel, tmp_path / kernel)
    uri = open_doc(client, tmp_path / kernel)
    await wait_publish(client, uri, 1)
    before = await _stats(client)
    published = len([p for p in client.published if p.uri == uri])  # type: ignore[attr-defined]
    client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri)))
    # the run, then the re-check with the run's input shapes (a static run of its own)
    await _until(client, lambda s: s.sim_runs > before.sim_runs and s.static_runs > before.static_runs)
    after = [p for p in client.published if p.uri == uri][published:]  # type: ignore[attr-defined]
    assert len(after) == 1, [[d.code for d in p.diagnostics] for p in after]
