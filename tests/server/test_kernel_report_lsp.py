"""``nki/kernelReport`` through the real server: the run history of a document (newest first), the
verdicts and error figures of each verification, measured vs estimated latency kept apart, the cost
model's timeline SVG, and the first mismatch of a failing verification."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types as T
from pytest_lsp import LanguageClient
from server_helpers import WORKSPACE, change, open_doc, raw_request, wait_publish

pytestmark = pytest.mark.asyncio
REPORT = "nki/kernelReport"
KERNEL = (WORKSPACE / "add" / "kernel.py").read_text()
TASK = (WORKSPACE / "add" / "task.py").read_text()


def plain(x: Any) -> Any:
    """A custom request's result as JSON values (pygls hands unknown structures back as named tuples)."""
    if hasattr(x, "_asdict"):
        return {k: plain(v) for k, v in x._asdict().items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    return x


async def kernel_report(client: LanguageClient, uri: str) -> dict[str, Any]:
    return plain(await raw_request(client, REPORT, {"uri": uri}))


def own_task(kernel: str) -> str:
    """The add kernel with its task in the same file (kernel and task in one file)."""
    return "import numpy as np\n" + kernel + "\n\n" + TASK[TASK.index("def get_inputs"):]


async def verify_and_wait(client: LanguageClient, uri: str, runs: int) -> dict[str, Any]:
    before = len([m for m in client.messages if m.message.startswith("NKI: ")])
    res = await client.workspace_execute_command_async(T.ExecuteCommandParams("nki.verify", [uri]))
    assert res is not None and res["started"] is True, res
    for _ in range(2400):
        if len([m for m in client.messages if m.message.startswith("NKI: ")]) > before:
            break
        await asyncio.sleep(0.05)
    report = await kernel_report(client, uri)
    assert len(report["runs"]) == runs, report["runs"]
    return report


async def test_history_verdicts_latency_timeline_and_mismatch(client: LanguageClient, tmp_path: Path):
    text = own_task(KERNEL)
    uri = open_doc(client, tmp_path / "kernel.py", text)
    await wait_publish(client, uri, 1)
    empty = await kernel_report(client, uri)
    assert empty["runs"] == [] and empty["timeline_svg"] == "" and empty["mismatch_of"] is None
    assert empty["task"].endswith("kernel.py") and empty["version"] == 1

    good = await verify_and_wait(client, uri, 1)
    (run,) = good["runs"]
    assert run["kind"] == "verify" and run["verdict"] == "correct" and run["correct"] is True
    assert run["version"] == 1 and run["max_abs_error"] == 0 and run["seeds"] and run["elements"] > 0
    assert run["measured"] is None  # the embedded simulator measures nothing
    assert run["estimated"]["source"] == "cost model" and run["estimated"]["microseconds"] > 0
    assert good["timeline_svg"] == "" and good["timeline_of"] is None  # a verification's estimate has no timeline
    opened = plain(await raw_request(client, REPORT, {"uri": uri, "timeline": True}))  # the user opened the report
    assert opened["timeline_of"] == 1 and opened["timeline_svg"].startswith("<?xml")
    assert "estimated by the cost model" in opened["timeline_svg"] and "<script" not in opened["timeline_svg"]
    assert opened["runs"] == good["runs"]  # estimating the timeline is not a run of the history
    assert (await kernel_report(client, uri))["timeline_svg"] == opened["timeline_svg"]  # kept for refreshes

    wrong = text.replace("c_tile = nl.add(a_tile, b_tile", "c_tile = nl.subtract(a_tile, b_tile")
    assert wrong != text
    change(client, uri, 2, wrong)
    await wait_publish(client, uri, 2)
    bad = await verify_and_wait(client, uri, 2)
    newest, older = bad["runs"]
    assert older == run  # the earlier verification is kept, newest first
    assert bad["timeline_of"] == 1  # the timeline computed on version 1 stays, labelled with its version
    assert newest["version"] == 2 and newest["verdict"] == "incorrect" and newest["correct"] is False
    assert newest["mismatches"] > 0 and newest["max_abs_error"] > 0
    assert bad["mismatch_of"] == 0
    seed = next(s for s in newest["seeds"] if not s["correct"])
    assert 0 < seed["mismatches"] <= seed["elements"]
    first = seed["first_mismatch"]
    assert first is not None and first["partition"] == first["index"][0] and first["free"] == first["index"][1:]
    assert first["got"] != first["expected"]
    heat = first["heatmap"]  # where the differing elements are: partition x free bins
    assert heat["partitions"] * heat["free"] == seed["elements"]
    assert sum(map(sum, heat["counts"])) == seed["mismatches"]
    assert len(heat["counts"]) == len(heat["row_starts"]) <= 16 and len(heat["counts"][0]) == len(heat["col_starts"]) <= 32


@pytest.mark.parametrize("params", [{"uri": "file:///not/open.py"}, {}, {"uri": 42}, None])
async def test_a_document_that_is_not_open_is_an_error_not_a_crash(client: LanguageClient, params: Any):
    with pytest.raises(Exception):
        await raw_request(client, REPORT, params)
    assert await raw_request(client, "nki/stats", {}) is not None  # still up
