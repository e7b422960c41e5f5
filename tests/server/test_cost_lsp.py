"""The cost model's estimate in the editor, through the real server process (pytest-lsp).

The server is ``cost_fake_server.py``: the real server whose toolchain answers at once with a
hand-built ``CostEstimate`` (``cost_helpers.matmul_estimate``, read from ``estimate.json`` beside the
task) and whose remote runner is a stand-in reporting a measured latency. A save goes the real way:
run pool → ``RunResult`` → code lens, hovers, inlay hints. Waits are on the server's own messages
(publishDiagnostics, workspace/codeLens/refresh), never on a clock.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from cost_helpers import (
    EXAMPLE,
    K_LINE,
    KERNEL_LINE,
    LOAD_B,
    M_LINE,
    MATMUL,
    N_LINE,
    Seen,
    col,
    cost_hints,
    end,
    hover,
    lenses,
    line,
    matmul_estimate,
)
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, LanguageClient
from server_helpers import SERVER_ENV, change, open_doc, start

pytestmark = pytest.mark.asyncio
FAKE_SERVER = [sys.executable, str(Path(__file__).with_name("cost_fake_server.py"))]
VERIFIED = "NKI: ✓ verified on trn1, max error 0"


@pytest_lsp.fixture(config=ClientServerConfig(server_command=FAKE_SERVER, server_env=SERVER_ENV))
async def client(lsp_client: LanguageClient):
    yield lsp_client
    await lsp_client.shutdown_session()


def _workspace(tmp_path: Path, estimate: Any) -> Path:
    """kernel.py + task.py (the l2_matmul example) and the estimate the fake toolchain returns."""
    shutil.copy(EXAMPLE / "kernel_classic.py", tmp_path / "kernel.py")
    shutil.copy(EXAMPLE / "task.py", tmp_path / "task.py")
    (tmp_path / "estimate.json").write_text(json.dumps(estimate))
    return tmp_path / "kernel.py"


async def _session(client: LanguageClient, tmp_path: Path, estimate: Any = "matmul",
                   **settings: Any) -> tuple[Seen, str, str]:
    est = matmul_estimate().model_dump(mode="json") if estimate == "matmul" else estimate
    kernel = _workspace(tmp_path, est)
    await start(client, {"nkiAgent": {"debounceMs": 20, "verifyOnSave": "local", **settings}})
    seen = Seen(client)
    uri = open_doc(client, kernel)
    await seen.until("publish", 1)
    return seen, uri, kernel.read_text()


async def _save(client: LanguageClient, seen: Seen, uri: str, refreshes: int = 1) -> None:
    client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri)))
    await seen.until("refresh", refreshes)


async def test_the_verified_lens_carries_the_estimate_labelled_est(client: LanguageClient, tmp_path: Path):
    seen, uri, _ = await _session(client, tmp_path)
    assert await lenses(client, uri) == [(KERNEL_LINE - 1, "NKI: not verified — Verify")]
    await _save(client, seen, uri)
    assert await lenses(client, uri) == [
        (KERNEL_LINE - 1, f"{VERIFIED} · ≈ 6.97 ms est. trn1")]


async def test_hovers_on_a_loop_header_a_cost_line_and_the_kernel_name(client: LanguageClient, tmp_path: Path):
    seen, uri, text = await _session(client, tmp_path)
    await _save(client, seen, uri)
    md = await hover(client, uri, K_LINE, col(text, K_LINE, "affine_range") + 2)
    assert "this loop: 41 % of estimated time, DMA-bound, 23 % of HBM bandwidth, 64 trips (affine)" in md
    assert "Iterates" in md or "affine_range" in md  # the API blurb is still there
    md = await hover(client, uri, M_LINE, col(text, M_LINE, "for"))  # on the keyword: the cost only
    assert md == "this loop: 99 % of estimated time, TensorE-bound, 11 % of HBM bandwidth, 4 trips (affine)"
    md = await hover(client, uri, MATMUL, col(text, MATMUL, "acc"))
    assert "this line: 62 % of estimated time (nisa.nc_matmul on TensorE, 4.32 ms)" in md
    md = await hover(client, uri, LOAD_B, col(text, LOAD_B, "nl.load") + 4)
    assert "this line: 25 % of estimated time (nl.load on DMA, 1.74 ms)" in md and "nl.load" in md
    assert await hover(client, uri, MATMUL, len(line(text, MATMUL)) + 3) == ""  # past the code: nothing
    md = await hover(client, uri, KERNEL_LINE, col(text, KERNEL_LINE, "matmul_kernel") + 2)
    assert md.startswith("**matmul_kernel** — cost model estimate\n\n≈ 6.97 ms est. trn1, TensorE-bound")
    assert "| TensorE | 6.5 ms | 93 % | 1,024 |" in md and "- PSUM accumulation modelled as in-place" in md
    assert "remote runner" not in md


async def test_inlay_hints_at_the_end_of_each_loop_header(client: LanguageClient, tmp_path: Path):
    seen, uri, text = await _session(client, tmp_path)
    assert await cost_hints(client, uri, text) == {}
    await _save(client, seen, uri)
    hints = await cost_hints(client, uri, text)
    assert {ln: (ch, label) for ln, (ch, label, _) in hints.items()} == {
        M_LINE: (end(text, M_LINE), "≈ 99 % · TensorE"), N_LINE: (end(text, N_LINE), "≈ 99 % · TensorE"),
        K_LINE: (end(text, K_LINE), "≈ 41 % · DMA")}
    assert hints[K_LINE][2] == "this loop: 41 % of estimated time, DMA-bound, 23 % of HBM bandwidth, 64 trips (affine)"


async def test_without_an_estimate_no_cost_anywhere(client: LanguageClient, tmp_path: Path):
    seen, uri, text = await _session(client, tmp_path, estimate=None)
    await _save(client, seen, uri)
    assert await lenses(client, uri) == [(KERNEL_LINE - 1, VERIFIED)]
    assert await cost_hints(client, uri, text) == {}
    assert "estimated" not in await hover(client, uri, K_LINE, col(text, K_LINE, "affine_range") + 2)
    assert await hover(client, uri, M_LINE, col(text, M_LINE, "for")) == ""
    assert "cost model" not in await hover(client, uri, KERNEL_LINE, col(text, KERNEL_LINE, "matmul_kernel"))


async def test_cost_hints_off_keeps_the_hovers(client: LanguageClient, tmp_path: Path):
    seen, uri, text = await _session(client, tmp_path, costHints=False)
    await _save(client, seen, uri)
    assert await cost_hints(client, uri, text) == {}
    assert "41 % of estimated time" in await hover(client, uri, K_LINE, col(text, K_LINE, "for"))
    client.workspace_did_change_configuration(T.DidChangeConfigurationParams(
        settings={"nkiAgent": {"verifyOnSave": "local", "costHints": True}}))
    assert set(await cost_hints(client, uri, text)) == {M_LINE, N_LINE, K_LINE}


async def test_after_edits_costs_follow_their_lines_and_edited_lines_lose_them(client: LanguageClient, tmp_path: Path):
    seen, uri, text = await _session(client, tmp_path)
    await _save(client, seen, uri)
    lines = text.split("\n")
    lines[K_LINE - 1] = lines[K_LINE - 1].replace("K // TILE_K", "K // TILE_K // 2")  # the k header edited
    edited = "# notes\n# more notes\n" + "\n".join(lines)
    change(client, uri, 2, edited)
    hints = await cost_hints(client, uri, edited)
    assert {ln: label for ln, (_, label, _) in hints.items()} == {
        M_LINE + 2: "≈ 99 % · TensorE", N_LINE + 2: "≈ 99 % · TensorE"}  # k's header changed: no hint
    assert all(tip.endswith("(estimate of an earlier version of this file)") for _, _, tip in hints.values())
    assert await hover(client, uri, M_LINE, 1) == ""  # the old line numbers point at nothing now
    assert "this loop" not in await hover(client, uri, K_LINE + 2, col(edited, K_LINE + 2, "for"))
    md = await hover(client, uri, MATMUL + 2, col(edited, MATMUL + 2, "acc"))
    assert "this line: 62 % of estimated time" in md and "*(estimate of an earlier version of this file)*" in md
    md = await hover(client, uri, KERNEL_LINE + 2, col(edited, KERNEL_LINE + 2, "matmul_kernel"))
    assert md.startswith("**matmul_kernel** — cost model estimate (estimate of an earlier version of this file)")
    assert await lenses(client, uri) == [
        (KERNEL_LINE + 1, f"{VERIFIED} · ≈ 6.97 ms est. trn1 (before your edits)")]
    change(client, uri, 3, text)  # undone: the text the estimate is of again
    hints = await cost_hints(client, uri, text)
    assert set(hints) == {M_LINE, N_LINE, K_LINE} and not any("earlier" in tip for _, _, tip in hints.values())


async def test_a_measured_runner_latency_keeps_its_own_lens(client: LanguageClient, tmp_path: Path):
    seen, uri, text = await _session(client, tmp_path, verifyOnSave="remote", runnerUrl="http://127.0.0.1:9")
    await _save(client, seen, uri, refreshes=2)  # the local verification and the runner's
    titles = [title for _, title in await lenses(client, uri)]
    assert titles == [f"{VERIFIED} · ≈ 6.97 ms est. trn1", "NKI runner: ✓ correct · p50 5.21 ms"]
    assert "measured" not in titles[0] and "est." not in titles[1]
    md = await hover(client, uri, KERNEL_LINE, col(text, KERNEL_LINE, "matmul_kernel"))
    estimate, runner = md.split("\n\n---\n\n")
    assert estimate.startswith("**matmul_kernel** — cost model estimate") and "measured" not in \
        estimate.replace("not a measurement", "")
    assert runner.startswith("**matmul_kernel** — remote runner") and "measured on NeuronCore 0" in runner


async def test_a_newer_run_without_an_estimate_keeps_the_last_estimate_marked_stale(client: LanguageClient,
                                                                                    tmp_path: Path):
    seen, uri, text = await _session(client, tmp_path, verifyOnSave="off", simulateOnSave=True)
    await client.workspace_execute_command_async(T.ExecuteCommandParams("nki.verify", [uri]))
    await seen.until("refresh", 1)
    assert set(await cost_hints(client, uri, text)) == {M_LINE, N_LINE, K_LINE}
    (tmp_path / "estimate.json").write_text("null")  # the next run (a simulation on save) has no estimate
    edited = "# notes\n" + text
    published = seen.counts["publish"]
    change(client, uri, 2, edited)
    await seen.until("publish", published + 1)  # the static check of version 2
    client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri)))
    await seen.until("publish", published + 2)  # the simulation of version 2
    assert (await client.protocol.send_request_async("nki/stats", {})).sim_runs == 2
    hints = await cost_hints(client, uri, edited)
    assert set(hints) == {M_LINE + 1, N_LINE + 1, K_LINE + 1}
    assert all(tip.endswith("(estimate of an earlier version of this file)") for _, _, tip in hints.values())
    assert (await lenses(client, uri))[0][1].endswith("est. trn1 (before your edits)")
