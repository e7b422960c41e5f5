"""Through the LSP: ``source.fixAll.nki`` (advertised, one versioned edit with every verified fix, the ignored
finding left alone), and ``# nki: ignore`` comments + ``nkiAgent.severity`` on what is published — the cases of
``tests/fixtures/fix_all/suppress_cases.json`` that the CLI tests run too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types as T
from pytest_lsp import LanguageClient
from server_helpers import FIXTURES, ROOT, apply_lsp_edits, change, open_doc, raw_request, wait_publish

FIX_ALL = FIXTURES / "fix_all"
CASES = [c for c in json.loads((FIX_ALL / "suppress_cases.json").read_text())["cases"] if "pyproject" not in c]
SEVERITY = {T.DiagnosticSeverity.Error: "error", T.DiagnosticSeverity.Warning: "warning",
            T.DiagnosticSeverity.Information: "info", T.DiagnosticSeverity.Hint: "hint"}
pytestmark = pytest.mark.asyncio


def case_text(case: dict[str, Any]) -> str:
    lines = (FIX_ALL / "three_fixes.py").read_text().split("\n")
    for n, extra in case.get("append", {}).items():
        lines[int(n) - 1] += extra
    for n, extra in sorted(case.get("insert", {}).items(), key=lambda kv: -int(kv[0])):
        lines.insert(int(n) - 1, extra)
    return "\n".join(lines)


async def fix_all_actions(client: LanguageClient, uri: str, only: list[str]) -> list[dict[str, Any]]:
    return await raw_request(client, T.TEXT_DOCUMENT_CODE_ACTION, T.CodeActionParams(
        T.TextDocumentIdentifier(uri), T.Range(T.Position(0, 0), T.Position(0, 0)),
        T.CodeActionContext(diagnostics=[], only=only)))  # type: ignore[arg-type]


def applied(text: str, action: dict[str, Any]) -> str:
    doc_edit = action["edit"]["documentChanges"][0]
    edits = [T.TextEdit(T.Range(T.Position(e["range"]["start"]["line"], e["range"]["start"]["character"]),
                                T.Position(e["range"]["end"]["line"], e["range"]["end"]["character"])), e["newText"])
             for e in doc_edit["edits"]]
    return apply_lsp_edits(text, edits)


async def test_fix_all_on_save_applies_every_verified_fix_but_the_ignored(bare_client: LanguageClient,
                                                                          tmp_path: Path):
    client = bare_client
    init = await client.initialize_session(T.InitializeParams(capabilities=T.ClientCapabilities(),
                                                              root_uri=ROOT.as_uri()))
    provider = init.capabilities.code_action_provider
    assert isinstance(provider, T.CodeActionOptions) and "source.fixAll.nki" in (provider.code_action_kinds or [])
    for name, count in (("three_fixes", 3), ("one_ignored", 2)):
        text = (FIX_ALL / f"{name}.py").read_text()
        uri = open_doc(client, tmp_path / f"{name}.py", text)
        await wait_publish(client, uri, 1)
        change(client, uri, 2, text)  # the edit is pinned to the version it was computed for
        for only in (["source.fixAll.nki"], ["source.fixAll"], ["source"]):
            actions = await fix_all_actions(client, uri, only)
            assert [a["kind"] for a in actions] == ["source.fixAll.nki"], (name, only, actions)
            assert actions[0]["title"].endswith(f"({count})")
            assert actions[0]["edit"]["documentChanges"][0]["textDocument"]["version"] == 2
            assert applied(text, actions[0]) == (FIX_ALL / f"{name}.fixed.py").read_text()
        assert await fix_all_actions(client, uri, ["source.organizeImports"]) == []
        quick = await fix_all_actions(client, uri, ["quickfix"])
        assert all(a.get("kind") != "source.fixAll.nki" for a in quick)
        fixed = (FIX_ALL / f"{name}.fixed.py").read_text()
        change(client, uri, 3, fixed)
        pub = await wait_publish(client, uri, 3)
        assert list(pub.diagnostics) == []  # the ignored finding stays in the text, hidden
        assert await fix_all_actions(client, uri, ["source.fixAll.nki"]) == []  # nothing left to fix


async def test_ignore_comments_and_severity_setting_shape_what_is_published(client: LanguageClient, tmp_path: Path):
    for n, case in enumerate(CASES):
        client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings={"nkiAgent": {
            "severity": dict(level.split("=") for level in case.get("severity", []))}}))
        await fix_all_actions(client, "file:///nowhere.py", ["source.fixAll.nki"])  # the setting is in place
        uri = open_doc(client, tmp_path / f"case{n}.py", case_text(case))
        pub = await wait_publish(client, uri, 1)
        got = [[d.range.start.line + 1, d.code, SEVERITY[d.severity or T.DiagnosticSeverity.Error]]
               for d in sorted(pub.diagnostics, key=lambda d: d.range.start.line)]
        assert got == case["expect"], case["name"]
