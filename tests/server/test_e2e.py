"""End to end through the real server process (pytest-lsp): diagnostics tiers, staleness, hover,
inlay hints, code actions, code lens, settings, non-ASCII positions, huge documents."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types as T
from pytest_lsp import LanguageClient
from server_helpers import (
    status,
    apply_lsp_edits,
    FIXTURES,
    WORKSPACE,
    change,
    document_text,
    open_doc,
    raw_request,
    start,
    wait_publish,
)

pytestmark = pytest.mark.asyncio

BAD = (FIXTURES / "static" / "partition_limit_bad.py").read_text()
GOOD = (FIXTURES / "static" / "partition_limit_good.py").read_text()
PARTITION = "err_num_partition_exceed_arch_limit"


def codes(p: T.PublishDiagnosticsParams) -> set[str]:
    return {str(d.code) for d in p.diagnostics}


async def hover_text(client: LanguageClient, uri: str, line: int, character: int) -> str:
    h = await client.text_document_hover_async(T.HoverParams(T.TextDocumentIdentifier(uri), T.Position(line, character)))
    return h.contents.value if h else ""


def find(text: str, needle: str, nth: int = 0) -> tuple[int, int]:
    """(line, character) of the nth occurrence of an ASCII-only-prefix needle."""
    offset = -1
    for _ in range(nth + 1):
        offset = text.index(needle, offset + 1)
    line = text.count("\n", 0, offset)
    col = offset - (text.rfind("\n", 0, offset) + 1)
    return line, col


async def test_diagnostics_after_open_and_change(client: LanguageClient, tmp_path: Path):
    uri = open_doc(client, tmp_path / "k.py", BAD)
    pub = await wait_publish(client, uri, 1)
    assert PARTITION in codes(pub)
    d = next(d for d in pub.diagnostics if d.code == PARTITION)
    assert d.source == "nki-check" and d.severity == T.DiagnosticSeverity.Error
    assert d.code_description is not None and d.code_description.href.startswith("https://")
    assert d.related_information and d.related_information[0].location.uri == uri
    line, col = find(BAD, "nl.ndarray((256")
    assert (d.range.start.line, d.range.start.character) == (line, col)
    change(client, uri, 2, GOOD)
    pub = await wait_publish(client, uri, 2)
    assert PARTITION not in codes(pub)


async def test_stale_results_are_never_published(client: LanguageClient, tmp_path: Path):
    uri = open_doc(client, tmp_path / "k.py", BAD)
    await wait_publish(client, uri, 1)
    texts = {1: BAD}
    for v in range(2, 42):
        texts[v] = GOOD if v % 2 else BAD
        change(client, uri, v, texts[v])
        if v % 7 == 0:
            await asyncio.sleep(0.03)  # let some analyses start, so that some finish stale
    final = await wait_publish(client, uri, 41)
    assert PARTITION not in codes(final)
    await asyncio.sleep(0.3)
    versions = [p.version for p in client.published if p.uri == uri]
    assert versions == sorted(versions) and versions[-1] == 41
    for p in client.published:
        if p.uri == uri:  # every publish matches the text of the version it claims
            assert (PARTITION in codes(p)) == (texts[p.version] == BAD), p.version
    assert (await document_text(client, uri))["text"] == texts[41]


async def test_hover_on_tensor_and_call(client: LanguageClient):
    path = WORKSPACE / "matmul" / "kernel.py"
    text = path.read_text()
    uri = open_doc(client, path)
    await wait_publish(client, uri, 1)
    line, col = find(text, "acc = nl.zeros")
    md = await hover_text(client, uri, line, col + 1)
    assert "(128, 512)" in md and "psum" in md and "float32" in md and "128/128" in md
    assert "2,048 B" in md and "PSUM 16,384 B" in md and "rank | 2" in md
    line, col = find(text, "nisa.nc_matmul")
    md = await hover_text(client, uri, line, col + 6)
    assert "nc_matmul(stationary" in md and "K <= 128" in md
    line, col = find(text, "nl.copy")
    assert "Copies a tile" in await hover_text(client, uri, line, col + 4)


async def test_simulation_on_save_hover_and_inlay_hints(client: LanguageClient):
    path = WORKSPACE / "add" / "kernel.py"
    text = path.read_text()
    uri = open_doc(client, path)
    await wait_publish(client, uri, 1)
    client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri)))
    for _ in range(600):
        stats = await client.protocol.send_request_async("nki/stats", {})
        if stats.sim_runs >= 1:
            break
        await asyncio.sleep(0.05)
    line, col = find(text, "a_tile = nl.load")
    md = await hover_text(client, uri, line, col + 1)
    assert "last simulation" in md and "(128, 512)" in md and "sbuf" in md and "float32" in md
    assert "2,048 B" in md  # 512 fp32 per partition
    hints = await client.text_document_inlay_hint_async(T.InlayHintParams(
        T.TextDocumentIdentifier(uri), T.Range(T.Position(0, 0), T.Position(len(text.split("\n")), 0))))
    labels = {(h.position.line, h.label) for h in hints}
    assert (line, ": (128, 512) float32 sbuf") in labels


async def test_simulation_problems_published_as_nki_sim(client: LanguageClient, tmp_path: Path):
    text = (FIXTURES / "broken" / "dst_smaller.py").read_text()
    uri = open_doc(client, tmp_path / "dst_smaller.py", text)
    await wait_publish(client, uri, 1)
    client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri)))
    pub = await wait_publish(client, uri, 1, source="nki-sim", timeout=60)
    sim = [d for d in pub.diagnostics if d.source == "nki-sim"]
    assert sim and sim[0].code == "err_store_dst_shape_smaller_than_other_shape"
    line, _ = find(text, "col[...] = x")
    assert sim[0].range.start.line == line
    assert all(d.code_description and d.related_information for d in pub.diagnostics)


async def test_inlay_hint_loop_trip_count(client: LanguageClient, tmp_path: Path):
    text = (FIXTURES / "quickfix" / "shared_hbm_in_loop.py").read_text()
    uri = open_doc(client, tmp_path / "k.py", text)
    await wait_publish(client, uri, 1)
    hints = await client.text_document_inlay_hint_async(T.InlayHintParams(
        T.TextDocumentIdentifier(uri), T.Range(T.Position(0, 0), T.Position(100, 0))))
    line, col = find(text, "nl.affine_range(2)")
    assert any(h.label == " ×2" and h.position == T.Position(line, col + len("nl.affine_range(2)")) for h in hints)


async def test_quick_fix_applies_and_diagnostic_disappears(client: LanguageClient, tmp_path: Path):
    text = (FIXTURES / "quickfix" / "bool_and.py").read_text()
    uri = open_doc(client, tmp_path / "k.py", text)
    pub = await wait_publish(client, uri, 1)
    diag = next(d for d in pub.diagnostics if d.code == "err_ambiguous_tensor_truth_value")
    actions = await raw_request(client, T.TEXT_DOCUMENT_CODE_ACTION, T.CodeActionParams(
        T.TextDocumentIdentifier(uri), diag.range, T.CodeActionContext(diagnostics=[diag])))
    fixes = [a for a in actions if a.get("kind") == "quickfix"]
    assert fixes and fixes[0]["isPreferred"] is True
    titles = [a["title"] for a in actions]
    assert "Explain err_ambiguous_tensor_truth_value" in titles and "NKI: Fix kernel with agent" in titles
    assert "NKI: Verify now" in titles  # the file defines get_inputs: it is its own task
    doc_edit = fixes[0]["edit"]["documentChanges"][0]
    assert doc_edit["textDocument"]["version"] == 1
    edits = [T.TextEdit(T.Range(T.Position(e["range"]["start"]["line"], e["range"]["start"]["character"]),
                                T.Position(e["range"]["end"]["line"], e["range"]["end"]["character"])), e["newText"])
             for e in doc_edit["edits"]]
    fixed = apply_lsp_edits(text, edits)
    assert "hi & lo" in fixed
    change(client, uri, 2, fixed)
    pub = await wait_publish(client, uri, 2)
    assert "err_ambiguous_tensor_truth_value" not in codes(pub)
    explain = next(a for a in actions if a["title"].startswith("Explain"))
    res = await client.workspace_execute_command_async(T.ExecuteCommandParams(
        explain["command"]["command"], explain["command"]["arguments"]))
    assert "truth" in res.lower()


async def test_code_lens_and_verify_command(client: LanguageClient):
    path = WORKSPACE / "add" / "kernel.py"
    text = path.read_text()
    uri = open_doc(client, path)
    await wait_publish(client, uri, 1)
    lenses = [x for x in await client.text_document_code_lens_async(T.CodeLensParams(T.TextDocumentIdentifier(uri)))
              if status(x)]
    def_line, _ = find(text, "def add_kernel")
    assert [(lens.range.start.line, lens.command.title) for lens in lenses] == [(def_line, "NKI: not verified — Verify")]
    res = await client.workspace_execute_command_async(T.ExecuteCommandParams("nki.verify", [uri]))
    assert res["started"] is True
    for _ in range(1200):
        if any("verified" in m.message for m in client.messages):
            break
        await asyncio.sleep(0.05)
    assert any("✓ verified on trn1" in m.message for m in client.messages)
    lenses = [x for x in await client.text_document_code_lens_async(T.CodeLensParams(T.TextDocumentIdentifier(uri)))
              if status(x)]
    assert lenses[0].command.title.startswith("NKI: ✓ verified on trn1, max error 0")  # the backend is in the tooltip
    assert client.lens_refreshes >= 1
    kinds = [getattr(v, "kind", None) for v in (v for vs in client.progress_reports.values() for v in vs)]
    assert kinds[0] == "begin" and kinds[-1] == "end"


async def test_a_kernel_importing_a_sibling_module_simulates_and_verifies(client: LanguageClient, tmp_path: Path):
    kernel = (WORKSPACE / "add" / "kernel.py").read_text()
    kernel = kernel.replace("import neuronxcc.nki.language as nl\n",
                            "import neuronxcc.nki.language as nl\nfrom tile_sizes import ROWS\n")
    kernel = kernel.replace("P = nl.tile_size.pmax", "P = ROWS")
    task = (WORKSPACE / "add" / "task.py").read_text()
    kernel = "import numpy as np\n" + kernel + "\n\n" + task[task.index("def get_inputs"):]  # its own task
    (tmp_path / "tile_sizes.py").write_text("ROWS = 128  # the partition count\n")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    uri = open_doc(client, tmp_path / "kernel.py", kernel)
    await wait_publish(client, uri, 1)
    client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri)))
    for _ in range(1200):
        stats = await client.protocol.send_request_async("nki/stats", {})
        if stats.sim_runs >= 1:
            break
        await asyncio.sleep(0.05)
    pub = [p for p in client.published if p.uri == uri][-1]
    assert not [d for d in pub.diagnostics if d.source == "nki-sim"], pub.diagnostics
    res = await client.workspace_execute_command_async(T.ExecuteCommandParams("nki.verify", [uri]))
    assert res["started"] is True
    for _ in range(1200):
        if any("verified" in m.message or "differs" in m.message for m in client.messages):
            break
        await asyncio.sleep(0.05)
    assert any("✓ verified on trn1" in m.message for m in client.messages), [m.message for m in client.messages]
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # read, never written (no __pycache__)


async def test_invalid_settings_one_message_then_defaults(bare_client: LanguageClient, tmp_path: Path):
    await start(bare_client, {"nkiAgent": {"target": "trn9", "debounceMs": "fast", "verifyOnSave": "yes"}})
    uri = open_doc(bare_client, tmp_path / "k.py", BAD)
    pub = await wait_publish(bare_client, uri, 1)
    assert PARTITION in codes(pub)  # the server works on defaults
    warnings = [m for m in bare_client.messages if "invalid settings" in m.message]
    assert len(warnings) == 1 and "target" in warnings[0].message and "debounceMs" in warnings[0].message
    bare_client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings={"nkiAgent": 42}))
    bare_client.workspace_did_change_configuration(T.DidChangeConfigurationParams(
        settings={"nkiAgent": {"target": "trn2", "taskMap": {"x": 3}}}))
    for _ in range(100):
        if len([m for m in bare_client.messages if "invalid settings" in m.message]) >= 3:
            break
        await asyncio.sleep(0.02)
    warnings = [m for m in bare_client.messages if "invalid settings" in m.message]
    assert len(warnings) == 3 and "taskMap" in warnings[2].message
    # still alive and answering
    assert (await document_text(bare_client, uri))["version"] == 1


async def test_non_ascii_positions(client: LanguageClient, tmp_path: Path):
    prefix = '    s = "😀é𝔘"; '
    text = BAD.replace("    t = nl.ndarray((256", prefix + "t = nl.ndarray((256")
    uri = open_doc(client, tmp_path / "k.py", text)
    pub = await wait_publish(client, uri, 1)
    d = next(d for d in pub.diagnostics if d.code == PARTITION)
    line, _ = find(text, "t = nl.ndarray((256")
    # UTF-16: the emoji and 𝔘 take two units each
    assert d.range.start == T.Position(line, len(prefix) + 2 + 4)
    # insert after the emoji with a UTF-16 range; the store must agree with a code-point splice
    at = T.Position(line, len('    s = "😀') + 1)
    change(client, uri, 2, "ü", T.Range(at, at))
    expected = text.replace('"😀é𝔘"', '"😀üé𝔘"')
    assert (await document_text(client, uri))["text"] == expected
    pub = await wait_publish(client, uri, 2)
    d = next(d for d in pub.diagnostics if d.code == PARTITION)
    assert d.range.start == T.Position(line, len(prefix) + 2 + 4 + 1)
    md = await hover_text(client, uri, line, len(prefix) + 2 + 4 + 5)  # on `nl.ndarray` after astral chars
    assert "nl.ndarray(shape" in md


async def test_huge_document_gets_one_info_diagnostic(client: LanguageClient, tmp_path: Path):
    text = BAD + ("# padding line to make the document huge\n" * 150_000)
    assert len(text) > 5 * 1024 * 1024
    uri = open_doc(client, tmp_path / "big.py", text)
    pub = await wait_publish(client, uri, 1)
    assert [(d.severity, d.source) for d in pub.diagnostics] == [(T.DiagnosticSeverity.Information, "nki-agent")]
    assert await client.text_document_hover_async(T.HoverParams(T.TextDocumentIdentifier(uri), T.Position(0, 1))) is None
    change(client, uri, 2, "x", T.Range(T.Position(0, 0), T.Position(0, 0)))
    assert (await document_text(client, uri))["text"] == "x" + text


async def test_settings_are_pulled_when_the_client_sends_no_options(bare_client: LanguageClient, tmp_path: Path):
    """VS Code style: no initializationOptions, settings answered through workspace/configuration."""
    bare_client.set_configuration({"nkiAgent": {"target": "trn9", "modelBackend": "openai:no-url"}})
    caps = T.ClientCapabilities(workspace=T.WorkspaceClientCapabilities(configuration=True))
    await bare_client.initialize_session(T.InitializeParams(capabilities=caps))
    for _ in range(200):
        if any("invalid settings" in m.message for m in bare_client.messages):
            break
        await asyncio.sleep(0.02)
    (warning,) = [m for m in bare_client.messages if "invalid settings" in m.message]
    # modelBackend is machine-scoped: a workspace/configuration answer cannot set it, so it is not even read
    assert "target" in warning.message and "modelBackend" not in warning.message


def _workers_of(pid: int, marker: bytes = b"nki_agent.toolchain.isolation.worker") -> list[int]:
    """Child processes of ``pid`` whose command line holds ``marker`` (Linux /proc): sandbox workers."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes()
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and marker in cmd:
            out.append(int(entry.name))
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
async def test_cancelling_verify_kills_the_sandboxed_worker(client: LanguageClient):
    path = FIXTURES / "hostile" / "infinite_loop.py"
    uri = open_doc(client, path)
    server_pid = client._server.pid  # type: ignore[attr-defined]
    before = set(_workers_of(server_pid))  # warm workers the server keeps for its next verification
    res = await client.workspace_execute_command_async(T.ExecuteCommandParams("nki.verify", [uri]))
    assert res["started"]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while not client.progress_reports:  # the progress token may be created just after the command's answer
        assert loop.time() < deadline, "no progress was reported"
        await asyncio.sleep(0.05)
    token = next(iter(client.progress_reports))
    while not set(_workers_of(server_pid)) - before:  # the verification is running in its workers
        assert loop.time() < deadline, "no worker started"
        await asyncio.sleep(0.05)
    running = set(_workers_of(server_pid))  # the job's (a warm one it claimed included)
    client.window_work_done_progress_cancel(T.WorkDoneProgressCancelParams(token=token))
    deadline = loop.time() + 30  # the worker's own limit is 60 s: gone before 30 s means it was killed
    while running & set(_workers_of(server_pid)):
        assert loop.time() < deadline, "the worker survived the cancel"
        await asyncio.sleep(0.05)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
async def test_a_large_file_is_checked_with_the_helper_process(client: LanguageClient, tmp_path: Path):
    from nki_agent.diagnostics.static import check_text

    head, kernel = BAD.split("\n\n\n", 1)
    text = head + "\n\n\n" + "\n\n".join(kernel.replace("def kernel", f"def kernel{k}") for k in range(60))
    server_pid = client._server.pid  # type: ignore[attr-defined]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    while not _workers_of(server_pid, b"static.parallel import serve"):  # started once initialized
        assert loop.time() < deadline, "the server started no check helper"
        await asyncio.sleep(0.05)
    uri = open_doc(client, tmp_path / "big.py", text)
    pub = await wait_publish(client, uri, 1)
    expected = check_text("big.py", text)
    assert len(expected) == 60
    assert sorted((d.range.start.line + 1, str(d.code)) for d in pub.diagnostics) == \
        sorted((d.line, d.code) for d in expected)
