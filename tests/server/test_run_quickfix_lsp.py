"""A quick fix from every tier, through the real server: each deterministic fix the rules agent applies to
a problem only a run finds is offered as a code action on the diagnostic naming that problem.

Data-driven over the run-tier fixtures (``tests/fixtures/sim_fixes``, each file its own task, with
``# expect: code`` on the line the run reports): open → save → the run's diagnostic is published →
its code action (verified in the sandbox before it is offered) applies → the next save is clean.
"""

from __future__ import annotations

import ast
import asyncio
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types as T
from pytest_lsp import LanguageClient
from server_helpers import FIXTURES, ROOT, apply_lsp_edits, change, open_doc, raw_request, wait_publish

RUN = FIXTURES / "sim_fixes"
# every producer of a run-time fix in ``sim_fixes.fixes_for`` -> the fixture whose problem it repairs
PRODUCERS = {
    "_sequential_range": "affine_carried.py",
    "arange_through_names": "arange_via_names.py",
    "mask_bool_ops": "mask_and.py",
    "tile_constant": "tile_constant_256.py",
    "restore_output_store": "output_never_written.py",
    "psum_fp32": "wrong_psum_bf16.py",
    "hoist_shared_hbm": "wrong_hbm_in_loop_new.py",
    "new_api_imports": "new_code_classic_imports.py",
    "_psum_copy": "psum_dma_helper.py",
}
# not reachable from a run in the editor: the embedded simulator runs classic kernels, so "No module named
# 'neuronxcc'" never comes from it; with apiGeneration "new" the static check offers the same migration
NOT_FROM_A_RUN = {"migrate_to_new_api"}
RUN_SOURCES = ("nki-sim", "nki-verify")
TASKLESS = FIXTURES / "quickfix_taskless"  # kernels with no task: a __main__ driver runs them


def _expected(text: str) -> tuple[str, int]:
    for n, line in enumerate(text.splitlines(), 1):
        if m := re.search(r"#\s*expect:\s*([a-z0-9_]+)", line):
            return m.group(1), n
    raise AssertionError("fixture without # expect:")


def test_every_run_fix_producer_has_a_fixture() -> None:
    """A producer added to ``fixes_for`` without a fixture here fails: the editor must offer it too."""
    source = (ROOT / "diagnostics" / "sim_fixes.py").read_text()
    fn = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "fixes_for")
    called = {c.func.attr if isinstance(c.func, ast.Attribute) else c.func.id for c in ast.walk(fn)
              if isinstance(c, ast.Call) and isinstance(c.func, (ast.Attribute, ast.Name))}
    producers = {name for name in called if name.startswith("_") or name in PRODUCERS or name in NOT_FROM_A_RUN}
    producers -= {"_issue"}
    assert producers == set(PRODUCERS) | NOT_FROM_A_RUN
    assert all((RUN / f).exists() for f in PRODUCERS.values())


async def _stats(client: LanguageClient) -> Any:
    return await client.protocol.send_request_async("nki/stats", {})


async def _save_and_wait_run(client: LanguageClient, uri: str, version: int) -> T.PublishDiagnosticsParams:
    """didSave, then the publish that follows the run of that revision (the run's own, or the same
    diagnostics again when the run only confirmed the static tier)."""
    runs = (await _stats(client)).sim_runs
    client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri)))
    for _ in range(2400):  # a sandboxed run on a loaded machine; polled, never a fixed wait
        if (await _stats(client)).sim_runs > runs:
            break
        await asyncio.sleep(0.05)
    else:
        raise TimeoutError("the save did not run the kernel")
    # the run's publish leaves the server in the same step that counts the run, so it came before the answer
    return [p for p in client.published if p.uri == uri and p.version == version][-1]  # type: ignore[attr-defined]


async def _configure(client: LanguageClient, tier: str) -> None:
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings={"nkiAgent": {
        "debounceMs": 20, "simulateOnSave": True, "verifyOnSave": "local" if tier == "nki-verify" else "off"}}))


@pytest.mark.asyncio
@pytest.mark.parametrize("fixture", sorted(PRODUCERS.values()), ids=lambda f: f.removesuffix(".py"))
async def test_a_run_diagnostic_offers_the_rules_fix(client: LanguageClient, tmp_path: Path, fixture: str) -> None:
    code, _ = _expected((RUN / fixture).read_text())
    tier = "nki-verify" if code == "sim_wrong_result" else "nki-sim"  # a wrong result needs the reference
    await _configure(client, tier)
    await _fix_and_resave(client, tmp_path, RUN / fixture, tier)


async def _fix_and_resave(client: LanguageClient, tmp_path: Path, source: Path, tier: str) -> None:
    """open → save → the run's diagnostic → its quick fix applies → the next save is clean."""
    text = source.read_text()
    code, line = _expected(text)
    path = tmp_path / source.name
    shutil.copy(source, path)
    uri = open_doc(client, path, text)
    await wait_publish(client, uri, 1)
    pub = await _save_and_wait_run(client, uri, 1)
    found = [d for d in pub.diagnostics if d.code == code]
    assert found, f"{code} not published after save: {[(d.code, d.source) for d in pub.diagnostics]}"
    # the run's diagnostic; a problem the static check reports at the same range too is published once
    diag = next((d for d in found if d.source in RUN_SOURCES), found[0])
    if diag.source not in RUN_SOURCES:
        assert diag.source == "nki-check" and diag.data["tier"] == "static"
    else:
        assert diag.source == tier
        if code != "sim_wrong_result":
            assert diag.range.start.line == line - 1  # at the user's line
    actions = await raw_request(client, T.TEXT_DOCUMENT_CODE_ACTION, T.CodeActionParams(
        T.TextDocumentIdentifier(uri), diag.range, T.CodeActionContext(diagnostics=[diag])))
    fixes = [a for a in actions if a.get("kind") == "quickfix"]
    assert fixes, f"no quick fix offered for {code}: {[a['title'] for a in actions]}"
    assert fixes[0]["isPreferred"] is True and fixes[0]["diagnostics"][0]["code"] == code
    doc_edit = fixes[0]["edit"]["documentChanges"][0]
    assert doc_edit["textDocument"] == {"uri": uri, "version": 1}  # pinned to the revision it was verified on
    edits = [T.TextEdit(T.Range(T.Position(e["range"]["start"]["line"], e["range"]["start"]["character"]),
                                T.Position(e["range"]["end"]["line"], e["range"]["end"]["character"])), e["newText"])
             for e in doc_edit["edits"]]
    fixed = apply_lsp_edits(text, edits)
    assert fixed != text
    change(client, uri, 2, fixed)
    path.write_text(fixed)
    await wait_publish(client, uri, 2)
    clean = await _save_and_wait_run(client, uri, 2)
    assert [(d.code, d.source) for d in clean.diagnostics
            if d.severity in (T.DiagnosticSeverity.Error, T.DiagnosticSeverity.Warning)] == []


@pytest.mark.asyncio
@pytest.mark.parametrize("fixture", sorted(p.name for p in TASKLESS.glob("*.py")), ids=lambda f: f.removesuffix(".py"))
async def test_a_taskless_run_diagnostic_offers_the_rules_fix(client: LanguageClient, tmp_path: Path,
                                                              fixture: str) -> None:
    """No task anywhere: the save simulates through the file's own ``__main__`` driver, and the fix is
    verified by running that driver again on the fixed buffer."""
    await _configure(client, "nki-sim")
    await _fix_and_resave(client, tmp_path, TASKLESS / fixture, "nki-sim")


@pytest.mark.asyncio
async def test_a_run_fix_is_not_offered_on_a_newer_text(client: LanguageClient, tmp_path: Path) -> None:
    """The fix was verified for revision 1; after an edit the same diagnostic (resent by a lagging
    client) gets no quick fix: the run's diagnostics belong to the text they ran on."""
    fixture = "affine_carried.py"
    text = (RUN / fixture).read_text()
    await _configure(client, "nki-sim")
    path = tmp_path / fixture
    shutil.copy(RUN / fixture, path)
    uri = open_doc(client, path, text)
    await wait_publish(client, uri, 1)
    pub = await _save_and_wait_run(client, uri, 1)
    diag = next(d for d in pub.diagnostics if d.source == "nki-sim")
    change(client, uri, 2, text.replace("def kernel(", "# an edit\ndef kernel("))
    await wait_publish(client, uri, 2)
    actions = await raw_request(client, T.TEXT_DOCUMENT_CODE_ACTION, T.CodeActionParams(
        T.TextDocumentIdentifier(uri), diag.range, T.CodeActionContext(diagnostics=[diag])))
    assert [a for a in actions if a.get("kind") == "quickfix"] == []
