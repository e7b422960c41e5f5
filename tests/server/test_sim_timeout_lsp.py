"""``nkiAgent.simulationTimeout``: the on-save run of a kernel that never ends is stopped by the sandbox
after the configured limit and reported as one ``sim_timeout`` diagnostic; the server keeps answering."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from lsprotocol import types as T
from pytest_lsp import LanguageClient
from server_helpers import open_doc, start, wait_publish

pytestmark = pytest.mark.asyncio

KERNEL = '''# nki-task: task.py
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def add(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    while True:  # never ends
        x = nl.add(x, 1.0)
    nl.store(out, value=x)
    return out
'''


TASK = '''import numpy as np


def get_inputs():
    return [np.ones((128, 64), np.float32), np.ones((128, 64), np.float32)]


def reference(a, b):
    return a + b
'''


async def test_a_runaway_kernel_is_stopped_after_the_configured_limit(bare_client: LanguageClient,
                                                                      tmp_path: Path) -> None:
    await start(bare_client, {"nkiAgent": {"debounceMs": 20, "simulateOnSave": True, "simulationTimeout": 2}})
    (tmp_path / "task.py").write_text(TASK)
    path = tmp_path / "kernel.py"
    path.write_text(KERNEL)
    uri = open_doc(bare_client, path, KERNEL)
    await wait_publish(bare_client, uri, 1)
    bare_client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri)))
    pub = await wait_publish(bare_client, uri, source="nki-sim", timeout=120.0)
    codes = [d.code for d in pub.diagnostics if d.source == "nki-sim"]
    assert codes == ["sim_timeout"], codes
    message = next(d.message for d in pub.diagnostics if d.source == "nki-sim")
    # the configured limit, not the default 60 s: the sandbox's ("within 2 s") or the simulator's own deadline
    # inside it (a little earlier, so the worker can still answer), whichever stops it first
    named = re.search(r"(?:within|limit of) ([0-9.]+) s", message)
    assert named and 1.0 <= float(named.group(1)) <= 2.0, message
    hover = await bare_client.text_document_hover_async(T.HoverParams(T.TextDocumentIdentifier(uri),
                                                                      T.Position(line=8, character=5)))
    assert hover is not None  # still answering


async def test_an_out_of_range_limit_is_refused_and_the_default_kept(bare_client: LanguageClient) -> None:
    from nki_agent.server.settings import parse

    settings, problems = parse({"nkiAgent": {"simulationTimeout": 0}})
    assert settings.simulation_timeout == 60.0 and problems and "simulationTimeout" in problems[0]
    await start(bare_client, {"nkiAgent": {"simulationTimeout": 99999}})  # one message, the server runs on
