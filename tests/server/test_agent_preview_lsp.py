"""The fix agent with a client that previews its edit (the VS Code extension's diff with Accept / Reject)
and shows its own progress, through the real server: a rejected diff is "rejected", not "stale" (no Rerun
offered, nothing applied); a stale answer offers Rerun; ``nki/agentProgress`` replaces work-done progress;
``nki/agentResult`` carries the run's dollars and tokens."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, LanguageClient
from server_helpers import (
    status,
    FIXTURES,
    SERVER,
    SERVER_ENV,
    apply_lsp_edits,
    document_text,
    open_doc,
    start,
    wait_publish,
)

pytestmark = pytest.mark.asyncio
BROKEN = (FIXTURES / "quickfix" / "bool_and.py").read_text()  # its own task; the rules backend fixes it
REJECTED = "rejected by the user"  # agent_fix.REJECTED, the extension's ids.ts AGENT_FIX_REJECTED


def _plain(params: Any) -> dict[str, Any]:
    if isinstance(params, dict):
        return params
    if hasattr(params, "_asdict"):
        return dict(params._asdict())
    return dict(vars(params))


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER,
                                              server_env={**SERVER_ENV, "NKI_AGENT_TEST_IN_PROCESS": "1"}))
async def preview_client(lsp_client: LanguageClient):
    await start(lsp_client, {"nkiAgent": {"debounceMs": 20, "simulateOnSave": False}})
    yield
    await lsp_client.shutdown_session()


class Previewing:
    """A client that answers the agent's applyEdit as the user chose in the diff preview."""

    def __init__(self, client: LanguageClient, answer: T.ApplyWorkspaceEditResult):
        self.edits: list[T.ApplyWorkspaceEditParams] = []
        self.asked: list[str] = []
        self.progress: list[dict[str, Any]] = []
        self.result: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

        @client.feature(T.WORKSPACE_APPLY_EDIT)
        def apply_edit(params: T.ApplyWorkspaceEditParams) -> T.ApplyWorkspaceEditResult:
            self.edits.append(params)
            return answer

        @client.feature(T.WINDOW_SHOW_MESSAGE_REQUEST)
        def ask(params: T.ShowMessageRequestParams) -> None:
            self.asked.append(params.message)

        @client.feature("nki/agentProgress")
        def progress(params: Any) -> None:
            self.progress.append(_plain(params))

        @client.feature("nki/agentResult")
        def result(params: Any) -> None:
            if not self.result.done():
                self.result.set_result(_plain(params))


async def fix(client: LanguageClient, tmp_path: Path, answer: T.ApplyWorkspaceEditResult) -> tuple[Previewing, str]:
    ed = Previewing(client, answer)
    uri = open_doc(client, tmp_path / "kernel.py", BROKEN)
    res = await client.workspace_execute_command_async(T.ExecuteCommandParams(
        "nki.fixKernel", [{"uri": uri, "progress": "client"}]))
    assert res is not None and res["started"] is True and res["token"] is None, res
    await asyncio.wait_for(ed.result, timeout=120)
    return ed, uri


async def test_rejected_diff_is_not_stale_and_nothing_is_applied(preview_client: LanguageClient, tmp_path: Path):
    ed, uri = await fix(preview_client, tmp_path, T.ApplyWorkspaceEditResult(applied=False, failure_reason=REJECTED))
    result = ed.result.result()
    assert result["verdict"] == "verified" and result["rejected"] is True
    assert result["applied"] is False and result["stale"] is False
    assert ed.asked == []  # no "Rerun?" for a diff the user rejected
    assert any("fix rejected" in m.message for m in preview_client.messages)
    (edit,) = ed.edits
    assert edit.label == "NKI Agent: fix kernel"
    assert (await document_text(preview_client, uri))["text"] == BROKEN
    # the client shows progress itself: agent progress notifications, no work-done progress
    assert ed.progress and all(p["uri"] == uri and "$" in p["message"] for p in ed.progress)
    assert not preview_client.progress_reports
    assert isinstance(result["dollars"], float) and result["dollars"] >= 0
    assert isinstance(result["tokens"], int) and result["tokens"] >= 0 and result["turns"] >= 1


async def test_a_stale_preview_offers_rerun_once(preview_client: LanguageClient, tmp_path: Path):
    ed, _ = await fix(preview_client, tmp_path, T.ApplyWorkspaceEditResult(
        applied=False, failure_reason="stale: the document changed during the preview"))
    result = ed.result.result()
    assert result["stale"] is True and result["rejected"] is False and result["applied"] is False
    assert len(ed.asked) == 1 and "changed while the agent ran" in ed.asked[0]


@pytest.mark.parametrize("order", ["didChange before the answer", "answer before didChange"])
async def test_accepted_fix_keeps_the_agents_verification(preview_client: LanguageClient, tmp_path: Path,
                                                          order: str):
    """Accept in the preview: the buffer becomes the text the agent verified, so the lens says it is verified
    (by the agent), not "not verified" — whether the client's didChange comes before or after its answer."""
    client = preview_client
    edits: list[T.ApplyWorkspaceEditParams] = []

    def accept(params: T.ApplyWorkspaceEditParams) -> None:
        (change,) = params.edit.document_changes or []
        assert isinstance(change, T.TextDocumentEdit)
        new = apply_lsp_edits(BROKEN, [e for e in change.edits if isinstance(e, T.TextEdit)])
        client.text_document_did_change(T.DidChangeTextDocumentParams(
            T.VersionedTextDocumentIdentifier(uri=change.text_document.uri, version=2),
            [T.TextDocumentContentChangeWholeDocument(text=new)]))

    ed = Previewing(client, T.ApplyWorkspaceEditResult(applied=True))

    def apply_edit(params: T.ApplyWorkspaceEditParams) -> T.ApplyWorkspaceEditResult:
        edits.append(params)
        if order == "didChange before the answer":
            accept(params)
        return T.ApplyWorkspaceEditResult(applied=True)

    client.protocol.fm.features[T.WORKSPACE_APPLY_EDIT] = apply_edit  # Accept, as the extension answers it

    uri = open_doc(client, tmp_path / "kernel.py", BROKEN)
    res = await client.workspace_execute_command_async(T.ExecuteCommandParams(
        "nki.fixKernel", [{"uri": uri, "progress": "client"}]))
    assert res["started"] is True, res
    result = await asyncio.wait_for(ed.result, timeout=120)
    assert result["verdict"] == "verified" and result["applied"] is True, result
    if order == "answer before didChange":
        accept(edits[0])
    await wait_publish(client, uri, 2)
    lenses = await client.text_document_code_lens_async(T.CodeLensParams(T.TextDocumentIdentifier(uri)))
    titles = [lens.command.title for lens in lenses if lens.command and status(lens)]
    assert titles and all(t.startswith("NKI: ✓ verified on") and "by the agent" in t for t in titles), titles
    assert (await document_text(client, uri))["version"] == 2
