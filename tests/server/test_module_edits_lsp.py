"""Module-level edits through the real server: a tile constant a kernel reads, changed at module level,
changes that kernel's published diagnostics; unrelated constants and helpers added around it change
nothing but the lines below them (``diagnostics/static/reads.py`` keys each cached result by what it read)."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsprotocol import types as T
from pytest_lsp import LanguageClient
from server_helpers import change, open_doc, wait_publish

pytestmark = pytest.mark.asyncio

# public-style tiled kernels, written for this test
TEXT = '''import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

TILE_P = 128
TILE_F = 512


@nki.jit
def scale_kernel(a):
    out = nl.ndarray((TILE_P, TILE_F), dtype=nl.float32, buffer=nl.shared_hbm)
    buf = nl.ndarray((TILE_P, TILE_F), dtype=nl.float32, buffer=nl.sbuf)
    buf[...] = nl.multiply(nl.load(a[0:TILE_P, 0:TILE_F]), 2.0)
    nl.store(out, value=buf)
    return out


@nki.jit
def exp_kernel(a):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.exp(nl.load(a[0:128, 0:512])))
    return out
'''
LIMIT = "err_num_partition_exceed_arch_limit"


def at(line: int, start: int = 0, end: int = 0) -> T.Range:
    return T.Range(T.Position(line, start), T.Position(line, end))


def limits(pub: T.PublishDiagnosticsParams) -> list[int]:
    return sorted(d.range.start.line for d in pub.diagnostics if d.source == "nki-check" and d.code == LIMIT)


async def test_module_level_edits_reach_exactly_the_kernels_that_read_them(client: LanguageClient,
                                                                          tmp_path: Path) -> None:
    lines = TEXT.split("\n")
    const, buf = lines.index("TILE_P = 128"), next(k for k, ln in enumerate(lines) if ln.startswith("    buf = "))
    uri = open_doc(client, tmp_path / "tiled.py", TEXT)
    assert limits(await wait_publish(client, uri, 1)) == []
    change(client, uri, 2, "EXTRA = 7\n", at(const + 2))  # a constant nobody reads
    assert limits(await wait_publish(client, uri, 2)) == []
    change(client, uri, 3, "256", at(const, len("TILE_P = "), len("TILE_P = 128")))  # the tile above 128 rows
    assert limits(await wait_publish(client, uri, 3)) == [buf + 1, buf + 2]  # the alloc and load of 256 rows
    helper = "def rows(n):\n    return n // TILE_F\n\n\n"
    change(client, uri, 4, helper, at(const + 4))  # a helper above the kernel: its finding moves down
    moved = helper.count("\n")
    assert limits(await wait_publish(client, uri, 4)) == [buf + 1 + moved, buf + 2 + moved]
    change(client, uri, 5, "128", at(const, len("TILE_P = "), len("TILE_P = 256")))
    assert limits(await wait_publish(client, uri, 5)) == []
