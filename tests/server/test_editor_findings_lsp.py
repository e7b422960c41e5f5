"""Findings as the editor shows them, through the real server (issue 21's round of false notes):

- a matmul into an SBUF tile: one diagnostic at the call after a save — the static check's and the
  simulator's are de-duplicated, the message names the user's tile (``res``), not the parameter (``dst``) —
  with a verified quick fix (a PSUM tile, then ``tensor_copy``) after which the kernel verifies;
- Explain of the ``and``-between-mask-conditions finding speaks of ``and`` in a mask and of ``&``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types as T
from pytest_lsp import LanguageClient
from server_helpers import FIXTURES, apply_lsp_edits, change, open_doc, raw_request, wait_publish

pytestmark = pytest.mark.asyncio


def line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n")


def edits_of(action: dict) -> list[T.TextEdit]:
    doc = action["edit"]["documentChanges"][0]
    return [T.TextEdit(T.Range(T.Position(e["range"]["start"]["line"], e["range"]["start"]["character"]),
                               T.Position(e["range"]["end"]["line"], e["range"]["end"]["character"])), e["newText"])
            for e in doc["edits"]]


async def sim_runs(client: LanguageClient) -> int:
    stats = await client.protocol.send_request_async("nki/stats", {})
    return int(stats["sim_runs"] if isinstance(stats, dict) else stats.sim_runs)


def save(client: LanguageClient, uri: str) -> None:
    client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri)))


async def test_a_matmul_into_sbuf_is_one_finding_naming_the_tile_with_a_fix_that_verifies(
        client: LanguageClient, tmp_path: Path) -> None:
    text = (FIXTURES / "static" / "matmul_dst_memory_bad.py").read_text()
    uri = open_doc(client, tmp_path / "k.py", text)  # its own task (get_inputs / reference)
    line = line_of(text, "nisa.nc_matmul(dst=res")
    await wait_publish(client, uri, 1)  # the static check's
    runs = await sim_runs(client)
    save(client, uri)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    while loop.time() < deadline and await sim_runs(client) == runs:
        await asyncio.sleep(0.1)  # the save's run has finished: its finding and the static one, de-duplicated
    await sim_runs(client)  # its publish has gone out before this answer
    pub = [p for p in client.published if p.uri == uri][-1]
    assert any(p.version == 1 for p in client.published if p.uri == uri)
    at = [d for d in pub.diagnostics if d.range.start.line == line]
    assert len(at) == 1, pub.diagnostics  # the static finding and the run's, de-duplicated
    (d,) = at
    assert d.code == "sim_matmul_psum_placement" and "`res`" in d.message and "`dst`" not in d.message, d.message
    actions = await raw_request(client, T.TEXT_DOCUMENT_CODE_ACTION, T.CodeActionParams(
        T.TextDocumentIdentifier(uri), d.range, T.CodeActionContext(diagnostics=[d])))
    fixes = [a for a in actions if a.get("kind") == "quickfix"]
    assert fixes, [a["title"] for a in actions]
    fixed = apply_lsp_edits(text, edits_of(fixes[0]))
    assert "buffer=nl.psum" in fixed and "tensor_copy" in fixed
    change(client, uri, 2, fixed)
    pub = await wait_publish(client, uri, 2)
    assert not [x for x in pub.diagnostics if x.severity == T.DiagnosticSeverity.Error], pub.diagnostics
    await client.workspace_execute_command_async(T.ExecuteCommandParams("nki.verify", [uri]))
    deadline = loop.time() + 120
    while loop.time() < deadline and not any("NKI: ✓ verified" in m.message for m in client.messages):
        await asyncio.sleep(0.1)
    assert any("NKI: ✓ verified" in m.message for m in client.messages), [m.message for m in client.messages]


async def test_explain_of_and_between_mask_conditions_speaks_of_and_in_a_mask(client: LanguageClient,
                                                                               tmp_path: Path) -> None:
    text = (FIXTURES / "quickfix" / "mask_and_arange.py").read_text()
    uri = open_doc(client, tmp_path / "k.py", text)
    pub = await wait_publish(client, uri, 1)
    d = next(x for x in pub.diagnostics if x.code == "err_control_flow_condition_depending_on_arange")
    actions = await raw_request(client, T.TEXT_DOCUMENT_CODE_ACTION, T.CodeActionParams(
        T.TextDocumentIdentifier(uri), d.range, T.CodeActionContext(diagnostics=[d])))
    explain = next(a for a in actions if a["title"].startswith("Explain"))
    res = await client.workspace_execute_command_async(T.ExecuteCommandParams(
        explain["command"]["command"], explain["command"]["arguments"]))
    title, body = res.split("\n", 1)
    assert "and" in title and "`and`" in body and "&" in body, res[:400]
