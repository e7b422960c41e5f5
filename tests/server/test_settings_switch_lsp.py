"""Switching target or NKI version re-analyses and re-runs what is shown (like switching the interpreter in
Pylance), and a result of other settings is never shown as current; a save made while the server starts
(before the client's settings arrive) is kept and run once they have, under them."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types as T
from pytest_lsp import LanguageClient
from server_helpers import WORKSPACE, open_doc, start, wait_publish, status

pytestmark = pytest.mark.asyncio


def _kernel(tmp_path: Path) -> Path:
    for name in ("kernel.py", "task.py"):
        shutil.copy(WORKSPACE / "add" / name, tmp_path / name)
    return tmp_path / "kernel.py"


async def _stats(client: LanguageClient) -> Any:
    return await client.protocol.send_request_async("nki/stats", {})


async def _runs_after(client: LanguageClient, before: int, n: int = 1) -> None:
    """Until ``n`` more sandboxed runs have finished (the server counts them)."""
    for _ in range(4800):
        if (await _stats(client)).sim_runs >= before + n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the run never finished")


async def _lenses(client: LanguageClient, uri: str) -> list[str]:
    lenses = await client.text_document_code_lens_async(T.CodeLensParams(T.TextDocumentIdentifier(uri)))
    return [f"{lens.command.title} | {lens.command.tooltip}" for lens in lenses if lens.command and status(lens)]


async def _hover(client: LanguageClient, uri: str, text: str) -> str:
    """The hover on the tile ``c_tile`` (its table names the target: "| trn1 capacity | ...")."""
    line = next(i for i, ln in enumerate(text.split("\n")) if "c_tile = " in ln)
    col = text.split("\n")[line].index("c_tile") + 1
    h = await client.text_document_hover_async(T.HoverParams(T.TextDocumentIdentifier(uri), T.Position(line, col)))
    return h.contents.value if h and isinstance(h.contents, T.MarkupContent) else ""


# (launch settings, the workspace change, what is never shown after it, what the re-run shows)
SWITCHES = [
    pytest.param({"target": "trn2"}, {"target": "trn1"}, "trn2", "✓ verified on trn1", id="target trn2 -> trn1"),
    pytest.param({"target": "trn1"}, {"target": "trn2"}, "trn1", "✓ verified on trn2", id="target trn1 -> trn2"),
    pytest.param({"target": "trn3"}, {"target": "trn1"}, "trn3", "✓ verified on trn1", id="target trn3 -> trn1"),
    pytest.param({"target": "trn2"}, {"target": "trn2", "apiGeneration": "new"}, None, "trn2",
                 id="api generation auto -> new"),
]


@pytest.mark.parametrize(("launch", "switch", "gone", "shown"), SWITCHES)
async def test_a_settings_switch_reruns_what_is_shown(bare_client: LanguageClient, tmp_path: Path,
                                                      launch: dict[str, Any], switch: dict[str, Any],
                                                      gone: str | None, shown: str) -> None:
    client = bare_client
    await start(client, {"nkiAgent": {"debounceMs": 0, "verifyOnSave": "local", **launch}})
    path = _kernel(tmp_path)
    text = path.read_text()
    uri = open_doc(client, path, text)
    await wait_publish(client, uri, 1)
    before = (await _stats(client)).sim_runs
    client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri)))
    await _runs_after(client, before)
    first = await _lenses(client, uri)
    assert any(f"✓ verified on {launch['target']}" in t for t in first), first
    refreshes, published, ran = client.lens_refreshes, len(client.published), (await _stats(client)).sim_runs

    client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings={"nkiAgent": switch}))
    # at once: nothing of the old settings is shown as current (the lens and hovers; the re-run comes later)
    now = await _lenses(client, uri)
    if gone is not None:
        assert not any(gone in t for t in now), now
        md = await _hover(client, uri, text)
        assert f"{switch['target']} capacity" in md and f"{gone} capacity" not in md, md
    # no save, no Verify: the verification runs again under the new settings, and says so
    await _runs_after(client, ran)
    for _ in range(400):  # the lens refresh after the re-run (a notification we wait on)
        if client.lens_refreshes > refreshes:
            break
        await asyncio.sleep(0.05)
    after = await _lenses(client, uri)
    assert any(shown in t for t in after), after
    if gone is not None:
        assert not any(gone in t for t in after), after
        md = await _hover(client, uri, text)
        assert f"{switch['target']} capacity" in md and f"{gone} capacity" not in md, md
    stats = await _stats(client)
    assert stats.settings_dropped >= 1
    assert len(client.published) > published  # re-checked and re-published without an edit


async def test_a_save_while_the_server_starts_runs_once_settings_arrive(bare_client: LanguageClient,
                                                                         tmp_path: Path) -> None:
    """VS Code style: no launch options; the settings come through workspace/configuration, answered only
    after the document was opened and saved. The save is not lost and runs under those settings (verify
    on trn2), not the defaults (simulate on trn1)."""
    client = bare_client
    answer = asyncio.Event()

    async def configuration(params: T.ConfigurationParams) -> list[Any]:
        await answer.wait()
        return [{"verifyOnSave": "local", "target": "trn2", "debounceMs": 0}]

    client.protocol.fm.features[T.WORKSPACE_CONFIGURATION] = configuration
    client.lens_refreshes = 0  # type: ignore[attr-defined]

    @client.feature(T.WORKSPACE_CODE_LENS_REFRESH)
    def lens_refresh(params: Any) -> None:
        client.lens_refreshes += 1  # type: ignore[attr-defined]

    caps = T.ClientCapabilities(workspace=T.WorkspaceClientCapabilities(
        configuration=True, code_lens=T.CodeLensWorkspaceClientCapabilities(refresh_support=True)))
    await client.initialize_session(T.InitializeParams(capabilities=caps, root_uri=tmp_path.as_uri()))
    path = _kernel(tmp_path)
    uri = open_doc(client, path)
    client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri)))
    await wait_publish(client, uri, 1)  # the static tier runs meanwhile
    assert (await _stats(client)).sim_runs == 0  # the save waits for the settings
    answer.set()
    await _runs_after(client, 0)
    for _ in range(400):
        if client.lens_refreshes:  # type: ignore[attr-defined]
            break
        await asyncio.sleep(0.05)
    lenses = await _lenses(client, uri)
    assert any("✓ verified on trn2" in t for t in lenses), lenses
