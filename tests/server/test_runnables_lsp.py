"""Runnable lenses through the real server (rust-analyzer's "▶ Run"): ▶ Simulate over every kernel — the task's
kernel on the task's inputs (with Profile; its status lens runs Verify), another kernel from its shape line, a
kernel with nothing to run it told how to give it inputs — and ▶ Run __main__ over the driver; each lens's
command runs what it says, with work-done progress, and so does every save."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types as T
from pytest_lsp import LanguageClient
from server_helpers import FIXTURES, open_doc, wait_publish

pytestmark = pytest.mark.asyncio

TWO = (FIXTURES / "taskless" / "two_kernels.py").read_text()
TASK = '''import numpy as np

KERNEL = "double_kernel"


def get_inputs():
    return [np.random.rand(128, 64).astype(np.float32)]


def reference(x):
    return 2 * x
'''
SHAPED = TWO.replace("@nki.jit\ndef negate_kernel", "# nki: x_in=(128, 32) float32\n@nki.jit\ndef negate_kernel")


def line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n")


async def lens_rows(client: LanguageClient, uri: str) -> list[tuple[int, str, str, list[Any]]]:
    got = await client.text_document_code_lens_async(T.CodeLensParams(T.TextDocumentIdentifier(uri)))
    return [(x.range.start.line, x.command.title, x.command.command, list(x.command.arguments or []))
            for x in got or [] if x.command]


async def wait_for(client: LanguageClient, uri: str, needle: str, timeout: float = 120.0
                   ) -> list[tuple[int, str, str, list[Any]]]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    rows: list[tuple[int, str, str, list[Any]]] = []
    while loop.time() < deadline:
        rows = await lens_rows(client, uri)
        if any(needle in r[1] for r in rows):
            return rows
        await asyncio.sleep(0.1)
    raise TimeoutError(f"no lens with {needle!r}; last: {rows}")


async def wait_message(client: LanguageClient, needle: str, timeout: float = 120.0) -> str:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        for m in client.messages:
            if needle in m.message:
                return m.message
        await asyncio.sleep(0.1)
    raise TimeoutError(f"no message with {needle!r}; got {[m.message for m in client.messages]}")


def run(client: LanguageClient, row: tuple[int, str, str, list[Any]]) -> Any:
    return client.workspace_execute_command_async(T.ExecuteCommandParams(row[2], row[3]))


def titles_at(rows: list[tuple[int, str, str, list[Any]]], line: int) -> list[str]:
    return [r[1] for r in rows if r[0] == line]


async def test_every_kernel_and_the_driver_get_a_runnable_and_each_runs_what_it_says(
        client: LanguageClient, tmp_path: Path) -> None:
    path = tmp_path / "two_kernels.py"
    path.write_text(SHAPED)
    (tmp_path / "task.py").write_text(TASK)
    uri = open_doc(client, path)
    await wait_publish(client, uri, 1)
    negate, double = line_of(SHAPED, "def negate_kernel"), line_of(SHAPED, "def double_kernel")
    main = line_of(SHAPED, "if __name__")
    rows = await lens_rows(client, uri)
    # the task's kernel: its status lens (Verify), ▶ Simulate on the task's inputs, Profile
    assert titles_at(rows, double) == ["NKI: not verified — Verify", "▶ Simulate", "Profile"], rows
    # the other kernel (the task does not run it): ▶ Simulate from its shape line, no status lens
    assert titles_at(rows, negate) == ["▶ Simulate"], rows
    assert titles_at(rows, main) == ["▶ Run __main__ (simulated)"], rows
    by_title = {(r[0], r[1]): r for r in rows}
    assert by_title[(negate, "▶ Simulate")][2:] == ("nki.simulate", [uri, "negate_kernel", "shapes"])
    assert by_title[(double, "▶ Simulate")][2:] == ("nki.simulate", [uri, "double_kernel", "task"])

    started = await run(client, by_title[(negate, "▶ Simulate")])
    assert started == {"started": True, "via": "shapes", "kernel": "negate_kernel"}
    rows = await wait_for(client, uri, "simulated from the shape line")
    assert [r[0] for r in rows if "simulated from the shape line" in r[1]] == [negate], rows
    assert titles_at(rows, double)[0] == "NKI: not verified — Verify"  # the task's lens is where it was
    assert "simulated negate_kernel on trn1 (self-reported by the file) · ≈" in await wait_message(
        client, "simulated negate_kernel")

    started = await run(client, by_title[(double, "Profile")])
    assert started["started"] is True and started["measured_on_runner"] is False
    message = await wait_message(client, "✓ verified on trn1")
    assert "est. trn1" in message, message  # the latency, labelled as the cost model's estimate
    rows = await wait_for(client, uri, "✓ verified")
    assert [r[0] for r in rows if "✓ verified" in r[1]] == [double]
    assert any(getattr(v, "title", "") == "NKI: profiling" for vs in client.progress_reports.values() for v in vs)


async def test_run_main_runs_the_driver_and_a_kernel_with_nothing_is_told_how(client: LanguageClient,
                                                                            tmp_path: Path) -> None:
    path = tmp_path / "two_kernels.py"
    path.write_text(TWO)  # no task, no shape line: the driver runs double_kernel only
    uri = open_doc(client, path)
    await wait_publish(client, uri, 1)
    negate, main = line_of(TWO, "def negate_kernel"), line_of(TWO, "if __name__")
    rows = await lens_rows(client, uri)
    assert "▶ Simulate" in titles_at(rows, negate)  # the file's driver is what can run it
    run_main = next(r for r in rows if r[0] == main)
    assert run_main[1:] == ("▶ Run __main__ (simulated)", "nki.simulate", [uri, "", "main"])
    await run(client, run_main)
    await wait_for(client, uri, "simulated via __main__")
    assert "simulated double_kernel" in await wait_message(client, "simulated double_kernel")

    bare = tmp_path / "bare.py"
    bare.write_text(TWO.split('\n\nif __name__')[0] + "\n")
    uri = open_doc(client, bare)
    await wait_publish(client, uri, 1)
    rows = await lens_rows(client, uri)
    hints = [r for r in rows if r[1] == "▶ Simulate: needs a shape line"]
    assert not hints  # both kernels' status lenses say "no inputs" already
    assert all(r[1].startswith("NKI: no inputs") for r in rows), rows
    await run(client, ("", "", "nki.simulate", [uri, "negate_kernel", "shapes"]))  # type: ignore[arg-type]
    assert "add a shape line" in await wait_message(client, "nothing to simulate it with")


async def test_a_save_shows_work_done_progress_while_it_runs(client: LanguageClient, tmp_path: Path) -> None:
    path = tmp_path / "two_kernels.py"
    path.write_text(TWO)
    uri = open_doc(client, path)
    await wait_publish(client, uri, 1)
    client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri)))
    await wait_for(client, uri, "simulated via __main__")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    kinds: list[str] = []
    while loop.time() < deadline:  # the end goes out right after the run's publish
        for vs in client.progress_reports.values():
            if any(getattr(v, "title", "") == "NKI: simulating on save" for v in vs):
                kinds = [getattr(v, "kind", "") for v in vs]
        if kinds and kinds[-1] == "end":
            break
        await asyncio.sleep(0.05)
    assert kinds[0] == "begin" and kinds[-1] == "end", kinds


async def test_an_unknown_source_is_a_clear_error(client: LanguageClient, tmp_path: Path) -> None:
    path = tmp_path / "two_kernels.py"
    path.write_text(TWO)
    uri = open_doc(client, path)
    await wait_publish(client, uri, 1)
    with pytest.raises(Exception, match="unknown source"):
        await client.workspace_execute_command_async(T.ExecuteCommandParams("nki.simulate", [uri, "x", "rm -rf"]))
    with pytest.raises(Exception, match="needs the URI of an open document"):
        await client.workspace_execute_command_async(T.ExecuteCommandParams("nki.profile", ["file:///nowhere.py"]))


async def test_a_task_naming_a_host_wrapper_verifies_from_its_lens(client: LanguageClient, tmp_path: Path) -> None:
    """The SPMD tutorial's shape: the task's ``KERNEL`` is plain host Python launching an ``@nki.jit`` kernel on
    a grid. The lenses sit on the kernel it launches; its Verify verifies (no ``err_nested_kernel_with_spmd_grid``)."""
    for name in ("kernel.py", "task.py"):
        (tmp_path / name).write_text((FIXTURES / "host_wrapper" / name).read_text())
    text = (tmp_path / "kernel.py").read_text()
    uri = open_doc(client, tmp_path / "kernel.py")
    pub = await wait_publish(client, uri, 1)
    assert not [d for d in pub.diagnostics if d.severity == T.DiagnosticSeverity.Error], pub.diagnostics
    kernel = line_of(text, "def add_kernel_")
    rows = await lens_rows(client, uri)
    assert titles_at(rows, kernel) == ["NKI: not verified — Verify", "▶ Simulate", "Profile"], rows
    await run(client, next(r for r in rows if r[0] == kernel and r[1].endswith("Verify")))
    rows = await wait_for(client, uri, "✓ verified")
    assert [r[0] for r in rows if "✓ verified" in r[1]] == [kernel], rows
    pubs = [p for p in client.published if p.uri == uri]  # type: ignore[attr-defined]
    assert "err_nested_kernel_with_spmd_grid" not in {d.code for p in pubs for d in p.diagnostics}
    assert not [d for d in pubs[-1].diagnostics if d.severity == T.DiagnosticSeverity.Error], pubs[-1].diagnostics
