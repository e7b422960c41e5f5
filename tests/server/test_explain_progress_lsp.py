"""Honest text through the real server: Explain opens Markdown as a document (or leaves it to the command's
result and the hover), never a ``showMessage`` balloon; the agent's progress names the turn and the
backend ("turn 1: asking rules")."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, LanguageClient
from server_helpers import FIXTURES, SERVER, SERVER_ENV, open_doc, raw_request, start, wait_publish

pytestmark = pytest.mark.asyncio
CACHE = tempfile.mkdtemp(prefix="nki-agent-test-cache-")  # the server's per-user cache folder in these tests
ENV = {**SERVER_ENV, "XDG_CACHE_HOME": CACHE}
BROKEN = (FIXTURES / "quickfix" / "bool_and.py").read_text()  # its own task; the rules backend fixes it
CODE = "err_ambiguous_tensor_truth_value"


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, server_env=ENV))
async def doc_client(lsp_client: LanguageClient):
    """A client that can show documents (``window.showDocument.support``; pytest-lsp records them in
    ``shown_documents`` and answers success)."""
    caps = T.ClientCapabilities(window=T.WindowClientCapabilities(
        work_done_progress=True, show_document=T.ShowDocumentClientCapabilities(support=True)))
    await start(lsp_client, {"nkiAgent": {"debounceMs": 20, "simulateOnSave": False}}, caps)
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, server_env=ENV))
async def plain_client(lsp_client: LanguageClient):
    """A client without showDocument (and the agent's progress)."""
    await start(lsp_client, {"nkiAgent": {"debounceMs": 20, "simulateOnSave": False}})
    yield
    await lsp_client.shutdown_session()


async def _explain_action(client: LanguageClient, tmp_path: Path) -> tuple[str, T.Diagnostic, dict[str, Any]]:
    uri = open_doc(client, tmp_path / "kernel.py", BROKEN)
    pub = await wait_publish(client, uri, 1)
    diag = next(d for d in pub.diagnostics if d.code == CODE)
    actions = await raw_request(client, T.TEXT_DOCUMENT_CODE_ACTION, T.CodeActionParams(
        T.TextDocumentIdentifier(uri), diag.range, T.CodeActionContext(diagnostics=[diag])))
    return uri, diag, next(a for a in actions if a["title"] == f"Explain {CODE}")


async def test_explain_opens_a_markdown_document(doc_client: LanguageClient, tmp_path: Path):
    _, _, action = await _explain_action(doc_client, tmp_path)
    md = await doc_client.workspace_execute_command_async(T.ExecuteCommandParams(
        action["command"]["command"], action["command"]["arguments"]))
    assert md.startswith(f"**{CODE}**") and "**Fix:**" in md and "[Documentation](" in md
    (shown,) = doc_client.shown_documents
    path = Path(CACHE) / "nki-agent" / "explain" / f"{CODE}.md"
    assert shown.uri == path.as_uri() and shown.take_focus is True
    assert path.read_text() == md + "\n"
    assert not any(CODE in m.message for m in doc_client.messages)  # no showMessage balloon


async def test_explain_without_show_document_is_the_result_and_the_hover(plain_client: LanguageClient,
                                                                         tmp_path: Path):
    uri, diag, action = await _explain_action(plain_client, tmp_path)
    md = await plain_client.workspace_execute_command_async(T.ExecuteCommandParams(
        action["command"]["command"], action["command"]["arguments"]))
    assert md.startswith(f"**{CODE}**")
    assert not any(CODE in m.message for m in plain_client.messages)
    hover = await plain_client.text_document_hover_async(T.HoverParams(T.TextDocumentIdentifier(uri),
                                                                       diag.range.start))
    assert hover is not None and md in hover.contents.value  # the same Markdown on the diagnostic's range


@pytest.mark.parametrize("code", ["../../escaped", "a/b", "x" * 300, ""])
async def test_explain_of_a_hostile_code_writes_nothing(doc_client: LanguageClient, code: str):
    before = sorted(Path(CACHE).rglob("*"))
    try:
        await doc_client.workspace_execute_command_async(T.ExecuteCommandParams("nki.explainError", [code]))
    except Exception:  # noqa: BLE001 - an error answer is fine; a file outside the folder is not
        pass
    assert doc_client.shown_documents == []
    assert sorted(Path(CACHE).rglob("*")) == before
    assert not (Path(CACHE).parent / "escaped.md").exists()


async def test_agent_progress_names_the_turn_and_the_backend(doc_client: LanguageClient, tmp_path: Path):
    uri = open_doc(doc_client, tmp_path / "kernel.py", BROKEN)
    await wait_publish(doc_client, uri, 1)
    done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    @doc_client.feature(T.WORKSPACE_APPLY_EDIT)
    def apply_edit(params: T.ApplyWorkspaceEditParams) -> T.ApplyWorkspaceEditResult:
        return T.ApplyWorkspaceEditResult(applied=True)

    @doc_client.feature("nki/agentResult")
    def result(params: Any) -> None:
        if not done.done():
            done.set_result(params)

    res = await doc_client.workspace_execute_command_async(T.ExecuteCommandParams("nki.fixKernel", [uri]))
    assert res["started"] and res["token"]
    await asyncio.wait_for(done, timeout=120)
    reports = [v.message or "" for v in doc_client.progress_reports[res["token"]]
               if getattr(v, "kind", "") == "report"]
    assert any(m.startswith("turn 1: asking rules ·") for m in reports), reports
    assert any(m.startswith("turn 1: running verify") for m in reports), reports
    assert not any(m.startswith("turn 0") or "turn 1: turn" in m for m in reports), reports
