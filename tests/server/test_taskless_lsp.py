"""Feedback without a task, through the real server: a kernel file with no task module is still simulated
on save — via its ``__main__`` driver, a pytest test of the workspace that calls the kernel, or its shape
line — with simulator diagnostics at the user's line, concrete shapes in hovers and inlay hints, and a
code lens that says what ran; a kernel with none of them gets "Add input shapes", and applying it makes
the next save simulate. Kernels are public-style classic / new-API files written for these tests
(``tests/fixtures/taskless/``)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from lsprotocol import types as T
from pytest_lsp import LanguageClient
from server_helpers import FIXTURES, apply_lsp_edits, change, open_doc, wait_publish, status

pytestmark = pytest.mark.asyncio

TASKLESS = FIXTURES / "taskless"
SIM = "nki-sim"


def find(text: str, needle: str, nth: int = 0) -> tuple[int, int]:
    """(line0, character) of the ``nth`` occurrence of ``needle``."""
    at = -1
    for _ in range(nth + 1):
        at = text.index(needle, at + 1)
    line = text.count("\n", 0, at)
    return line, at - (text.rfind("\n", 0, at) + 1)


def place(tmp_path: Path, name: str, as_name: str | None = None) -> Path:
    dest = tmp_path / (as_name or Path(name).name)
    shutil.copy(TASKLESS / name, dest)
    return dest


def save(client: LanguageClient, uri: str) -> None:
    client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri)))


async def lenses(client: LanguageClient, uri: str) -> list[tuple[int, str]]:
    got = await client.text_document_code_lens_async(T.CodeLensParams(T.TextDocumentIdentifier(uri)))
    return [(lens.range.start.line, lens.command.title) for lens in got or [] if lens.command and status(lens)]


async def wait_lens(client: LanguageClient, uri: str, needle: str, timeout: float = 60.0) -> list[tuple[int, str]]:
    """The lenses once one holds ``needle`` (the run of the last save has been published)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    got: list[tuple[int, str]] = []
    while loop.time() < deadline:
        got = await lenses(client, uri)
        if any(needle in t for _, t in got):
            return got
        await asyncio.sleep(0.1)
    raise TimeoutError(f"no lens with {needle!r}; last: {got}")


async def hover(client: LanguageClient, uri: str, line: int, character: int) -> str:
    h = await client.text_document_hover_async(T.HoverParams(T.TextDocumentIdentifier(uri), T.Position(line, character)))
    return h.contents.value if h is not None and isinstance(h.contents, T.MarkupContent) else ""


async def inlay_labels(client: LanguageClient, uri: str, text: str) -> dict[int, list[str]]:
    hints = await client.text_document_inlay_hint_async(T.InlayHintParams(
        T.TextDocumentIdentifier(uri), T.Range(T.Position(0, 0), T.Position(text.count("\n") + 1, 0))))
    out: dict[int, list[str]] = {}
    for h in hints or []:
        out.setdefault(h.position.line, []).append(h.label if isinstance(h.label, str) else "".join(p.value for p in h.label))
    return out


def sim_diags(pub: T.PublishDiagnosticsParams) -> list[T.Diagnostic]:
    return [d for d in pub.diagnostics if d.source == SIM]


# ------------------------------------------------------------------------------------------ __main__
async def test_a_main_driver_is_simulated_on_save_with_concrete_hovers(client: LanguageClient, tmp_path: Path) -> None:
    path = place(tmp_path, "add_main.py")
    text = path.read_text()
    uri = open_doc(client, path)
    await wait_publish(client, uri, 1)
    def_line, _ = find(text, "def tile_add_kernel")
    assert await lenses(client, uri) == [(def_line, "NKI: no task — saving simulates via __main__")]
    line, col = find(text, "x_tile", 0)
    save(client, uri)
    got = await wait_lens(client, uri, "simulated via __main__")
    assert [(ln, t.split(" · ")[0]) for ln, t in got] == [(def_line, ("NKI: ✓ simulated via __main__ on trn1 "
                                                                      "(embedded), its checks pass — self-reported by the file"))]
    assert " est. trn1" in got[0][1], got  # the cost model's estimate, as a task's run shows it
    md = await hover(client, uri, line, col + 1)
    assert "(128, 512)" in md and "last simulation" in md, md
    md = await hover(client, uri, *find(text, "x_in", 0))  # a parameter: the driver's argument
    assert "(256, 1024)" in md, md
    hints = await inlay_labels(client, uri, text)
    z_line, _ = find(text, "z_tile = ")
    assert any("(128, 512)" in h and "float16" in h for h in hints.get(z_line, [])), hints


async def test_a_failing_assertion_in_the_driver_is_a_wrong_result_at_the_assert(client: LanguageClient,
                                                                                  tmp_path: Path) -> None:
    path = place(tmp_path, "add_main_wrong.py")
    text = path.read_text()
    uri = open_doc(client, path)
    await wait_publish(client, uri, 1)
    save(client, uri)
    pub = await wait_publish(client, uri, 1, timeout=60, source=SIM)
    [d] = [d for d in sim_diags(pub) if d.code == "sim_wrong_result"]
    assert d.severity == T.DiagnosticSeverity.Error
    assert d.range.start.line == find(text, "assert np.allclose")[0]
    assert "kernel and NumPy differ" in d.message and "__main__" in d.message
    got = await wait_lens(client, uri, "simulated via __main__")
    assert any(t.startswith("NKI: ✗ sim_wrong_result — simulated via __main__") for _, t in got), got
    md = await hover(client, uri, *find(text, "z_tile", 0))
    assert "(128, 256)" in md, md  # the kernel ran: its trace gives the shapes even though the check failed


async def test_an_nki_error_reached_through_the_driver_is_at_the_kernel_line(client: LanguageClient,
                                                                             tmp_path: Path) -> None:
    path = place(tmp_path, "add_main_nki_error.py")
    text = path.read_text()
    uri = open_doc(client, path)
    await wait_publish(client, uri, 1)
    save(client, uri)
    got = await wait_lens(client, uri, "simulated via __main__")  # the static check saw it too: published once, its tier
    assert any("✗ err_num_partition_exceed_arch_limit — simulated via __main__" in t for _, t in got), got
    pub = client.published[-1]  # type: ignore[attr-defined]
    found = [d for d in pub.diagnostics if d.code == "err_num_partition_exceed_arch_limit"]
    assert len(found) == 1 and found[0].range.start.line == find(text, "big = nl.load")[0], \
        [(d.code, d.range) for d in pub.diagnostics]
    md = await hover(client, uri, *find(text, "x_in", 0))
    assert "(256, 64)" in md, md  # the launch failed, its arguments are still known


# -------------------------------------------------------------------------------------------- pytest
async def test_a_pytest_test_that_calls_the_kernel_is_run_on_the_buffer(client: LanguageClient, tmp_path: Path) -> None:
    path = place(tmp_path, "pytest_style/scale_lib.py")
    place(tmp_path, "pytest_style/scale_lib_test_source.py", "test_scale_lib.py")
    text = path.read_text()
    uri = open_doc(client, path)
    await wait_publish(client, uri, 1)
    def_line, _ = find(text, "def scale_rows_kernel")
    assert await lenses(client, uri) == [(def_line, "NKI: no task — saving simulates via test_scale_lib.py::test_scale_rows")]
    save(client, uri)
    got = await wait_lens(client, uri, "simulated via test_scale_lib.py::test_scale_rows")
    assert [(ln, t.split(" · ")[0]) for ln, t in got] == [(def_line, (
        "NKI: ✓ simulated via test_scale_lib.py::test_scale_rows on trn1 (embedded), the test's worker reported a "
        "pass — self-reported by the file (the test imports it)"))]
    md = await hover(client, uri, *find(text, "prod", 0))
    assert "(128, 256)" in md and "last simulation" in md, md
    assert "(128, 1)" in await hover(client, uri, *find(text, "w_in", 0))
    # the test imports the buffer, not the file on disk: a bug typed (unsaved on disk) fails the test
    broken = text.replace("nl.multiply(x_tile, w_tile)", "nl.add(x_tile, w_tile)")
    change(client, uri, 2, broken)
    await wait_publish(client, uri, 2)
    save(client, uri)
    pub = await wait_publish(client, uri, 2, timeout=60, source=SIM)
    [d] = [d for d in sim_diags(pub) if d.code == "sim_wrong_result"]
    assert "test_scale_lib.py" in d.message and "Not equal to tolerance" in d.message, d.message
    assert d.range.start.line == def_line  # reported in the test file: shown at the kernel's def, naming it


# ------------------------------------------------------------------------------------------ shape line
async def test_a_shape_line_gives_inputs(client: LanguageClient, tmp_path: Path) -> None:
    path = place(tmp_path, "add_shapes.py")
    text = path.read_text().replace("a=(128, 512)", "a=(256, 512)")  # first too many partitions: an NKI error
    path.write_text(text)
    uri = open_doc(client, path)
    await wait_publish(client, uri, 1)
    def_line, _ = find(text, "def shaped_add_kernel")
    assert await lenses(client, uri) == [(def_line, "NKI: no task — saving simulates from the shape line")]
    save(client, uri)
    pub = await wait_publish(client, uri, 1, timeout=60, source=SIM)
    codes = {(d.code, d.range.start.line) for d in sim_diags(pub)}
    assert any(line == find(text, "a_tile = nl.load")[0] for _, line in codes), codes
    fixed = text.replace("a=(256, 512)", "a=(128, 512)")
    change(client, uri, 2, fixed)
    await wait_publish(client, uri, 2)
    save(client, uri)
    got = await wait_lens(client, uri, "✓ simulated from the shape line")
    assert [(ln, t.split(" · ")[0]) for ln, t in got] == [(def_line, (
        "NKI: ✓ simulated from the shape line on trn3 (embedded), nothing to compare with — self-reported by the file"))]
    assert " est. trn3" in got[0][1], got
    pub = await wait_publish(client, uri, 2)
    assert not [d for d in client.published[-1].diagnostics if d.source == SIM]  # type: ignore[attr-defined]
    md = await hover(client, uri, *find(fixed, "total", 0))
    assert "(128, 512)" in md and "last simulation" in md, md


async def test_a_malformed_shape_line_says_why(client: LanguageClient, tmp_path: Path) -> None:
    path = place(tmp_path, "add_shapes.py")
    text = path.read_text().replace("b=(128, 512) float32", "b=(128, 512) floaty")
    path.write_text(text)
    uri = open_doc(client, path)
    await wait_publish(client, uri, 1)
    save(client, uri)
    pub = await wait_publish(client, uri, 1, timeout=60, source=SIM)
    [d] = [d for d in sim_diags(pub) if d.code == "sim_bad_input"]
    assert d.severity == T.DiagnosticSeverity.Warning and "unknown dtype `floaty`" in d.message
    assert d.range.start.line == find(text, "# nki:")[0]


# ---------------------------------------------------------------------------------- no inputs at all
async def test_no_inputs_offers_add_input_shapes_and_applying_it_simulates(client: LanguageClient,
                                                                           tmp_path: Path) -> None:
    path = place(tmp_path, "add_bare.py")
    text = path.read_text()
    uri = open_doc(client, path)
    await wait_publish(client, uri, 1)
    def_line, _ = find(text, "def bare_add_kernel")
    [(line, title)] = await lenses(client, uri)
    assert line == def_line and "no inputs: add a shape line or a task" in title
    save(client, uri)
    await asyncio.sleep(0.5)
    [(_, title)] = await lenses(client, uri)
    assert "no inputs: add a shape line or a task" in title
    actions = await client.text_document_code_action_async(T.CodeActionParams(
        T.TextDocumentIdentifier(uri), T.Range(T.Position(def_line, 0), T.Position(def_line, 0)),
        T.CodeActionContext(diagnostics=[])))
    [add] = [a for a in actions or [] if isinstance(a, T.CodeAction) and a.title == "Add input shapes"]
    assert add.edit is not None and add.edit.document_changes
    edits = add.edit.document_changes[0].edits  # type: ignore[union-attr]
    new_text = apply_lsp_edits(text, list(edits))
    deco_line, _ = find(text, "@nki.jit")
    assert new_text.split("\n")[deco_line] == "# nki: a_in=(128, 128) float32, b_in=(128, 128) float32"
    change(client, uri, 2, new_text)
    await wait_publish(client, uri, 2)
    save(client, uri)
    got = await wait_lens(client, uri, "✓ simulated from the shape line")
    assert got[0][0] == def_line + 1
    md = await hover(client, uri, *find(new_text, "sum_tile", 0))
    assert "(128, 128)" in md and "last simulation" in md, md
    actions = await client.text_document_code_action_async(T.CodeActionParams(
        T.TextDocumentIdentifier(uri), T.Range(T.Position(def_line + 1, 0), T.Position(def_line + 1, 0)),
        T.CodeActionContext(diagnostics=[])))
    assert not [a for a in actions or [] if isinstance(a, T.CodeAction) and a.title.startswith("Add input shapes")]


async def test_a_file_with_a_driver_is_not_offered_input_shapes(client: LanguageClient, tmp_path: Path) -> None:
    path = place(tmp_path, "add_main.py")
    uri = open_doc(client, path)
    await wait_publish(client, uri, 1)
    actions = await client.text_document_code_action_async(T.CodeActionParams(
        T.TextDocumentIdentifier(uri), T.Range(T.Position(0, 0), T.Position(40, 0)), T.CodeActionContext(diagnostics=[])))
    assert not [a for a in actions or [] if isinstance(a, T.CodeAction) and a.title.startswith("Add input shapes")]


# ---------------------------------------------------------------------------------------------- lens
async def test_the_lens_marks_only_the_kernel_that_ran(client: LanguageClient, tmp_path: Path) -> None:
    path = place(tmp_path, "two_kernels.py")
    text = path.read_text()
    uri = open_doc(client, path)
    await wait_publish(client, uri, 1)
    negate, _ = find(text, "def negate_kernel")
    double, _ = find(text, "def double_kernel")
    before = await lenses(client, uri)
    assert [line for line, _ in before] == [negate, double]  # before a run: nothing known, both
    save(client, uri)
    got = await wait_lens(client, uri, "simulated via __main__")
    assert [line for line, _ in got] == [double], got
    assert "(128, 64)" in await hover(client, uri, *find(text, "twice", 0))


TWO_TASK = '''import numpy as np

KERNEL = "double_kernel"


def get_inputs():
    return [np.random.rand(128, 64).astype(np.float32)]


def reference(x):
    return 2 * x
'''


async def test_the_lens_marks_only_the_kernel_its_task_verifies(client: LanguageClient, tmp_path: Path) -> None:
    path = place(tmp_path, "two_kernels.py")
    (tmp_path / "task.py").write_text(TWO_TASK)
    text = path.read_text()
    uri = open_doc(client, path)
    await wait_publish(client, uri, 1)
    double, _ = find(text, "def double_kernel")
    assert await lenses(client, uri) == [(double, "NKI: not verified — Verify")]  # the task's KERNEL, not both
    res = await client.workspace_execute_command_async(T.ExecuteCommandParams("nki.verify", [uri]))
    assert res["started"] is True
    got = await wait_lens(client, uri, "✓ verified")
    assert [line for line, _ in got] == [double], got
