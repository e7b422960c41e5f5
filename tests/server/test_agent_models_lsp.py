"""The fix agent in the real server with real model backends (anthropic / openai SDKs) against fake API
servers on 127.0.0.1: multi-turn tool use end to end, and cancel from the editor mid-stream."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, LanguageClient
from server_helpers import FIXTURES, ROOT, SERVER, SERVER_ENV, document_text, open_doc, start

sys.path.insert(0, str(ROOT / "tests" / "agent"))
from fakes import Call, FakeAnthropic, FakeOpenAI, HttpError, Stall, Text, ToolUse  # noqa: E402

pytestmark = pytest.mark.asyncio
RESULT = "nki/agentResult"
BROKEN = (FIXTURES / "quickfix" / "bool_and.py").read_text()
FIX = {"old": "m = hi and lo", "new": "m = hi & lo"}
ENV = {**SERVER_ENV, "ANTHROPIC_API_KEY": "test-key"}


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, server_env=ENV))
async def client(lsp_client: LanguageClient):
    # each test starts the session (``_configure``): the model backend is machine-scoped, so it is read only
    # from the launch options, and the fake API server's URL is known only inside the test
    results: list[Any] = []
    lsp_client.agent_results = results  # type: ignore[attr-defined]

    @lsp_client.feature(RESULT)
    def on_result(params: Any) -> None:
        results.append(params._asdict() if hasattr(params, "_asdict") else params)

    @lsp_client.feature(T.WORKSPACE_APPLY_EDIT)
    def apply_edit(params: T.ApplyWorkspaceEditParams) -> T.ApplyWorkspaceEditResult:
        return T.ApplyWorkspaceEditResult(applied=True)

    yield
    await lsp_client.shutdown_session()


async def _result(client: LanguageClient, n: int = 1) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    while len(client.agent_results) < n:  # type: ignore[attr-defined]
        assert loop.time() < deadline, "no agent result"
        await client.wait_for_notification(RESULT)
    return dict(client.agent_results[n - 1])  # type: ignore[attr-defined]


async def _configure(client: LanguageClient, backend: str) -> None:
    """Start the session with ``backend`` in the launch options (machine-scoped: never a live change)."""
    await start(client, {"nkiAgent": {"modelBackend": backend, "debounceMs": 20, "simulateOnSave": False}})


@pytest.mark.parametrize("family", ["anthropic", "openai"])
async def test_model_repairs_the_kernel_through_the_server(client: LanguageClient, tmp_path: Path, family: str):
    script = [ToolUse([Call("lookup", {"query": "err_ambiguous_tensor_truth_value"})], text="Checking the code."),
              ToolUse([Call("verify", {"edits": [FIX]})])]
    fake_cls = FakeAnthropic if family == "anthropic" else FakeOpenAI
    with fake_cls(script) as fake:
        spec = f"anthropic:claude-opus-4-8@{fake.base_url}" if family == "anthropic" else f"openai:nki-sft@{fake.base_url}"
        await _configure(client, spec)
        uri = open_doc(client, tmp_path / "kernel.py", BROKEN)
        await document_text(client, uri)  # the configuration change and the open have been handled
        res = await client.workspace_execute_command_async(T.ExecuteCommandParams("nki.fixKernel", [uri]))
        assert res["started"] and res["backends"] == [spec.split("@")[0]]
        result = await _result(client)
        assert result["verdict"] == "verified", result
        assert result["applied"] is True and "m = hi & lo" in result["diff"]
        assert len(fake.bodies) == 2  # stopped at the first verified kernel
        second = fake.bodies[1]
        flat = str(second)
        assert "err_ambiguous_tensor_truth_value" in flat and "rank 2" in flat  # tool result + rank-aware prompt
        if family == "anthropic":
            assert fake.requests[0].headers.get("authorization", "").endswith("test-key") or \
                fake.requests[0].headers.get("x-api-key") == "test-key"


async def test_cancel_from_the_editor_stops_a_streaming_model(client: LanguageClient, tmp_path: Path):
    stall = Stall("Let me think")
    with FakeAnthropic([stall, Text("never")]) as fake:
        await _configure(client, f"anthropic:claude-opus-4-8@{fake.base_url}")
        uri = open_doc(client, tmp_path / "kernel.py", BROKEN)
        await document_text(client, uri)
        res = await client.workspace_execute_command_async(T.ExecuteCommandParams("nki.fixKernel", [uri]))
        await asyncio.get_running_loop().run_in_executor(None, stall.stalled.wait, 60)
        client.window_work_done_progress_cancel(T.WorkDoneProgressCancelParams(token=res["token"]))
        result = await _result(client)
        assert result["verdict"] == "cancelled" and result["applied"] is False
        assert (await document_text(client, uri))["text"] == BROKEN


async def test_a_backend_that_fails_escalates_to_the_next_tier(client: LanguageClient, tmp_path: Path):
    with FakeAnthropic([HttpError(401, "invalid x-api-key")]) as bad, \
            FakeOpenAI([ToolUse([Call("verify", {"edits": [FIX]})])]) as good:
        await _configure(client, f"anthropic:claude-opus-4-8@{bad.base_url},openai:nki-sft@{good.base_url}")
        uri = open_doc(client, tmp_path / "kernel.py", BROKEN)
        await document_text(client, uri)
        await client.workspace_execute_command_async(T.ExecuteCommandParams("nki.fixKernel", [uri]))
        result = await _result(client)
        assert result["verdict"] == "verified" and "auth error" in result["summary"], result
        assert len(bad.bodies) == 1  # an auth failure is not retried
