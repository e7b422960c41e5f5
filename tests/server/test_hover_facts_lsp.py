"""Hovers through the real server: ``nl.par_dim`` partitions (and ``par_dim(256)`` flagged statically), one
target for the static check, the simulation and the hover of a new-API kernel, and facts of the last
simulation replacing static guesses — a load with ``mask=`` included. Kernels are our own, public-style."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from lsprotocol import types as T
from pytest_lsp import LanguageClient
from server_helpers import open_doc, wait_publish

from nki_agent.diagnostics.static import Settings, check_text

pytestmark = pytest.mark.asyncio

PAR_DIM = '''import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def blocks_kernel(a):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    blocks = nl.zeros((4, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.sbuf)
    one = blocks[2]
    wide = nl.ndarray((2, nl.par_dim(256), 64), dtype=nl.float32, buffer=nl.sbuf)
    nl.store(out, value=nl.load(a))
    return out
'''

NEW_API_BF16_PSUM = '''import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl


def get_inputs():
    return [np.random.rand(128, 128).astype(np.float32), np.random.rand(128, 512).astype(np.float32)]


def reference(a, b):
    return a.T @ b


@nki.jit
def bf16_accumulate(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    y = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(x, a)
    nisa.dma_copy(y, b)
    acc = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.psum)
    nisa.nc_matmul(acc, x, y)
    res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(res, acc)
    nisa.dma_copy(out, res)
    return out
'''

MASKED = '''import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


def get_inputs():
    return [np.random.rand(128, 512).astype(np.float32)]


def reference(a):
    out = np.zeros_like(a)
    out[:100] = np.exp(a[:100])
    return out


@nki.jit
def masked_exp(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(512)[None, :]
    whole = nl.load(a)
    head = nl.load(a[i_p, i_f], mask=(i_p < 100))
    zero = nl.zeros((128, 512), dtype=a.dtype)
    nl.store(out[i_p, i_f], value=zero)
    nl.store(out[i_p, i_f], value=nl.exp(head, mask=(i_p < 100)), mask=(i_p < 100))
    return out
'''


def find(text: str, needle: str) -> tuple[int, int]:
    for n, line in enumerate(text.split("\n")):
        if needle in line:
            return n, line.index(needle)
    raise AssertionError(needle)


async def hover(client: LanguageClient, uri: str, text: str, needle: str, offset: int = 0) -> str:
    line, col = find(text, needle)
    h = await client.text_document_hover_async(T.HoverParams(T.TextDocumentIdentifier(uri), T.Position(line, col + offset)))
    return h.contents.value if h and isinstance(h.contents, T.MarkupContent) else ""


async def save_and_simulate(client: LanguageClient, uri: str) -> None:
    before = (await client.protocol.send_request_async("nki/stats", {})).sim_runs
    client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri)))
    for _ in range(2400):  # until the sandboxed simulation has finished (a loaded machine may take a while)
        if (await client.protocol.send_request_async("nki/stats", {})).sim_runs > before:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the simulation on save never finished")


async def test_par_dim_partitions_and_limit(client: LanguageClient, tmp_path: Path) -> None:
    uri = open_doc(client, tmp_path / "blocks.py", PAR_DIM)
    pub = await wait_publish(client, uri, 1)
    md = await hover(client, uri, PAR_DIM, "blocks = ", 1)
    assert "`(4, 128, 512)`" in md and "128/128 (dim 1, nl.par_dim)" in md
    assert "8,192 B of 180,224 B" in md  # 4 x 512 fp32 per partition, of trn1's SBUF
    md = await hover(client, uri, PAR_DIM, "one = ", 1)
    assert "`(128, 512)`" in md and "| partitions | 128/128 |" in md and "2,048 B" in md
    md = await hover(client, uri, PAR_DIM, "par_dim(128)", 2)
    assert "nl.par_dim(n)" in md and "partition axis" in md
    flagged = [d for d in pub.diagnostics if d.code == "err_num_partition_exceed_arch_limit"]
    line, col = find(PAR_DIM, "nl.par_dim(256)")
    assert [(d.range.start.line, d.range.start.character) for d in flagged] == [(line, col)]
    assert "par_dim(256)" in flagged[0].message


async def test_new_api_kernel_checked_simulated_and_shown_on_one_target(client: LanguageClient,
                                                                          tmp_path: Path) -> None:
    # the same kernel checked against trn1 would be an error (bf16 PSUM accumulation arrives with trn3)
    assert [d.code for d in check_text("k.py", NEW_API_BF16_PSUM, Settings(target="trn1"))] == ["sim_unsupported_dtype"]
    uri = open_doc(client, tmp_path / "bf16_acc.py", NEW_API_BF16_PSUM)
    pub = await wait_publish(client, uri, 1)
    assert [d for d in pub.diagnostics if d.source == "nki-check"] == []  # checked against trn3
    md = await hover(client, uri, NEW_API_BF16_PSUM, "acc = ", 1)
    assert "trn3 capacity" in md and "static inference" in md  # shown before any run: the target it would use
    md = await hover(client, uri, NEW_API_BF16_PSUM, "nisa.nc_matmul", 6)
    assert "limits shown for trn3" in md and "N <= 4096" in md
    await save_and_simulate(client, uri)
    md = await hover(client, uri, NEW_API_BF16_PSUM, "acc = ", 1)
    assert "last simulation" in md and "trn3 capacity" in md and "bfloat16" in md
    pubs = [p for p in client.published if p.uri == uri]  # type: ignore[attr-defined]
    assert not any(d.source in ("nki-sim", "nki-check") for p in pubs for d in p.diagnostics)


async def test_simulation_facts_replace_static_guesses_including_masked_loads(client: LanguageClient,
                                                                             tmp_path: Path) -> None:
    uri = open_doc(client, tmp_path / "masked.py", MASKED)
    await wait_publish(client, uri, 1)
    before = await hover(client, uri, MASKED, "whole = ", 1)
    assert "static inference" in before and "| shape | `unknown` |" in before  # the parameter's shape is unknown
    await save_and_simulate(client, uri)
    for needle in ("whole = ", "head = ", "zero = "):
        md = await hover(client, uri, MASKED, needle, 1)
        assert "last simulation" in md and "`(128, 512)`" in md and "float32" in md and "sbuf" in md, (needle, md)
        assert "?" not in md.split("| shape |")[1].split("\n")[0]
    lines = MASKED.split("\n")
    hints = await client.text_document_inlay_hint_async(T.InlayHintParams(
        T.TextDocumentIdentifier(uri), T.Range(T.Position(0, 0), T.Position(len(lines), 0))))
    labels = {h.position.line: h.label for h in hints or []}
    for needle in ("whole = ", "head = "):
        assert labels.get(find(MASKED, needle)[0]) == ": (128, 512) float32 sbuf"
