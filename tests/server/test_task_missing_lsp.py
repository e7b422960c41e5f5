"""A kernel without a task says so instead of saving in silence: a `# nki-task:` typo is a diagnostic naming
the path that was looked for, and the lens of a task-less kernel says what to add (real server)."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsprotocol import types as T
from pytest_lsp import LanguageClient
from server_helpers import change, open_doc, wait_publish, status

pytestmark = pytest.mark.asyncio

ROOT = Path(__file__).resolve().parents[2]
KERNEL = (ROOT / "examples" / "l1_add" / "kernel_classic.py").read_text()


async def _lenses(client: LanguageClient, uri: str) -> list[str]:
    got = await client.text_document_code_lens_async(T.CodeLensParams(T.TextDocumentIdentifier(uri)))
    return [lens.command.title for lens in got or [] if lens.command and status(lens)]


async def test_a_task_path_typo_names_the_missing_file(client: LanguageClient, tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "add_task.py").write_text((ROOT / "examples" / "l1_add" / "task.py").read_text())
    text = "# nki-task: tasks/add_tsak.py\n" + KERNEL
    uri = open_doc(client, tmp_path / "kernel.py", text)
    pub = await wait_publish(client, uri, 1)
    found = [d for d in pub.diagnostics if d.code == "sim_task_not_found"]
    assert len(found) == 1, [d.code for d in pub.diagnostics]
    d = found[0]
    assert d.severity == T.DiagnosticSeverity.Warning
    assert "`tasks/add_tsak.py`" in d.message and str(tmp_path / "tasks" / "add_tsak.py") in d.message
    assert (d.range.start.line, d.range.start.character) == (0, len("# nki-task: "))
    assert (d.range.end.line, d.range.end.character) == (0, len("# nki-task: tasks/add_tsak.py"))
    assert any("no task found" in t for t in await _lenses(client, uri))
    # the typo fixed: the diagnostic goes, and the lens offers verification
    change(client, uri, 2, text.replace("add_tsak", "add_task"))
    pub = await wait_publish(client, uri, 2)
    assert not [d for d in pub.diagnostics if d.code == "sim_task_not_found"]
    assert all("no task found" not in t for t in await _lenses(client, uri))


async def test_a_kernel_without_any_task_says_what_to_add(client: LanguageClient, tmp_path: Path) -> None:
    uri = open_doc(client, tmp_path / "kernel.py", KERNEL)
    pub = await wait_publish(client, uri, 1)
    assert not [d for d in pub.diagnostics if d.code == "sim_task_not_found"]
    titles = await _lenses(client, uri)
    assert titles and all("no task found" in t and "# nki-task: PATH" in t for t in titles)
