"""Through the real server, a kernel with no task whose ``__main__`` driver passes its check at a small size and
then launches the kernel at a benchmark size beyond the simulator's memory cap: saving shows no error on the
kernel, an information note at the driver's benchmark line (cut off by a limit of the tool), a lens that says
its checks pass and where it was cut off, with the cost model's estimate; a driver that compares nothing gets
the neutral ○ "ran, nothing checked", never ✓ (fixtures: ``tests/fixtures/taskless/``, our code)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from lsprotocol import types as T
from pytest_lsp import LanguageClient
from server_helpers import FIXTURES, open_doc, wait_publish
from test_taskless_lsp import find, save, wait_lens

pytestmark = pytest.mark.asyncio

TASKLESS = FIXTURES / "taskless"


async def test_a_benchmark_launch_beyond_the_memory_cap_is_a_note_at_the_driver_not_a_kernel_error(
        client: LanguageClient, tmp_path: Path) -> None:
    path = tmp_path / "repeat_main_benchmark_oom.py"
    shutil.copy(TASKLESS / path.name, path)
    text = path.read_text()
    uri = open_doc(client, path)
    await wait_publish(client, uri, 1)
    save(client, uri)
    pub = await wait_publish(client, uri, 1, timeout=90, source="nki-sim")
    assert not [d for d in pub.diagnostics if d.severity == T.DiagnosticSeverity.Error], pub.diagnostics
    [note] = [d for d in pub.diagnostics if d.code == "sim_memory_limit"]
    driver_line = find(text, "big = tile_repeat_kernel")[0]
    assert note.severity == T.DiagnosticSeverity.Information and note.range.start.line == driver_line, note
    assert "cut off" in note.message and "not an error of the kernel" in note.message, note.message
    got = await wait_lens(client, uri, "simulated via __main__")
    [(_, lens)] = got
    assert lens.startswith("NKI: ✓ simulated via __main__"), got
    assert f"its checks pass (cut off at line {driver_line + 1} by the simulator's memory limit)" in lens, got
    assert " est. trn1" in lens, got  # the estimate of the launch that completed


async def test_a_driver_that_compares_nothing_gets_no_tick(client: LanguageClient, tmp_path: Path) -> None:
    path = tmp_path / "add_main_unchecked.py"
    shutil.copy(TASKLESS / path.name, path)
    uri = open_doc(client, path)
    await wait_publish(client, uri, 1)
    save(client, uri)
    got = await wait_lens(client, uri, "simulated via __main__", timeout=90)
    [(_, lens)] = got
    assert lens.startswith("NKI: ○ simulated via __main__") and "✓" not in lens, got
    assert "ran, nothing checked — self-reported by the file" in lens, got


async def test_a_benchmark_driver_runs_once_and_its_latency_read_is_a_note(client: LanguageClient,
                                                                          tmp_path: Path) -> None:
    """``nki.benchmark(warmup=5, iters=10)`` in the driver: the kernel runs once at the driver's shape (no error,
    ✓ for the check that passed), and the latency read the simulator cannot measure is an information note there."""
    path = tmp_path / "add_main_benchmark.py"
    shutil.copy(TASKLESS / path.name, path)
    text = path.read_text()
    uri = open_doc(client, path)
    await wait_publish(client, uri, 1)
    save(client, uri)
    pub = await wait_publish(client, uri, 1, timeout=90, source="nki-sim")
    assert not [d for d in pub.diagnostics if d.severity == T.DiagnosticSeverity.Error], pub.diagnostics
    read_line = find(text, "bench.benchmark_result")[0]
    [note] = [d for d in pub.diagnostics if d.code == "sim_unsupported_api"]
    assert note.severity == T.DiagnosticSeverity.Information and note.range.start.line == read_line, note
    assert "a measured latency needs Trainium hardware" in note.message, note.message
    [(_, lens)] = await wait_lens(client, uri, "simulated via __main__")
    assert lens.startswith("NKI: ✓ simulated via __main__"), lens
    assert f"its checks pass (cut off at line {read_line + 1} by an API the simulator" in lens, lens

