"""Hand-built cost-model estimates of ``examples/l2_matmul/kernel_classic.py`` for the server's cost tests,
and the client side those tests share (waiting on the server's messages, lens / hover / hint requests).

Lines are those of the example: the ``for m`` / ``for n`` / ``for k`` headers (26, 27, 29), the two loads
(30, 31), the matmul (32) and the store (34); the kernel's ``def`` is line 7.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsprotocol import types as T
from nki_agent.toolchain.protocol.cost import CostEstimate, EngineBusy, LineCost, LoopCost
from pytest_lsp import LanguageClient
from server_helpers import status

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "l2_matmul"
KERNEL_LINE, M_LINE, N_LINE, K_LINE, LOAD_A, LOAD_B, MATMUL, STORE = 7, 26, 27, 29, 30, 31, 32, 34


def matmul_estimate() -> CostEstimate:
    """≈ 6.97 ms on trn1, TensorE-bound; the K loop DMA-bound at 23 % of HBM bandwidth."""
    return CostEstimate(
        target="trn1", latency_us=6970.0, overhead_us=15.0, bound="TensorE",
        engines=[EngineBusy(lane="TensorE", engine="tensor", busy_us=6500.0, utilisation=0.93, instructions=1024),
                 EngineBusy(lane="DMA q0", engine="dma", busy_us=2100.0, utilisation=0.30, instructions=512),
                 EngineBusy(lane="VectorE", engine="vector", busy_us=120.0, utilisation=0.017, instructions=8),
                 EngineBusy(lane="GpSimd", engine="gpsimd", busy_us=0.0, utilisation=0.0, instructions=0)],
        lines=[LineCost(line=MATMUL, us=4320.0, share=0.62, engine="tensor", instructions=64, api="nisa.nc_matmul"),
               LineCost(line=LOAD_B, us=1740.0, share=0.25, engine="dma", instructions=64, api="nl.load"),
               LineCost(line=LOAD_A, us=440.0, share=0.063, engine="dma", instructions=64, api="nl.load"),
               LineCost(line=STORE, us=35.0, share=0.004, engine="dma", instructions=8, api="nl.store")],
        loops=[LoopCost(line=M_LINE, var="m", kind="affine", trips=4, us=6900.0, share=0.99, bound="TensorE",
                        hbm_bytes=8 << 20, hbm_utilisation=0.11, flops=1.07e9),
               LoopCost(line=N_LINE, var="n", kind="affine", trips=8, us=6880.0, share=0.987, bound="TensorE",
                        hbm_bytes=8 << 20, hbm_utilisation=0.11, flops=1.07e9),
               LoopCost(line=K_LINE, var="k", kind="affine", trips=64, us=2860.0, share=0.41, bound="DMA",
                        hbm_bytes=6 << 20, hbm_utilisation=0.23, flops=1.07e9)],
        flops=1.07e9, hbm_bytes=8 << 20, flop_utilisation=0.65, bandwidth_utilisation=0.11, instructions=1544,
        notes=["PSUM accumulation modelled as in-place"])


class Seen:
    """Counts the server's publishDiagnostics and codeLens/refresh; ``until`` waits for a count."""

    def __init__(self, client: LanguageClient) -> None:
        self.counts = {"publish": 0, "refresh": 0}
        self.changed = asyncio.Event()
        features = client.protocol.fm.features
        for method, key in ((T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS, "publish"), (T.WORKSPACE_CODE_LENS_REFRESH, "refresh")):
            features[method] = self._counting(features[method], key)

    def _counting(self, original: Callable[[Any], Any], key: str) -> Callable[[Any], Any]:
        def handler(params: Any) -> Any:
            self.counts[key] += 1
            self.changed.set()
            return original(params)
        return handler

    async def until(self, key: str, n: int, timeout: float = 60.0) -> None:
        async with asyncio.timeout(timeout):
            while self.counts[key] < n:
                self.changed.clear()
                await self.changed.wait()


async def lenses(client: LanguageClient, uri: str) -> list[tuple[int, str]]:
    found = await client.text_document_code_lens_async(T.CodeLensParams(T.TextDocumentIdentifier(uri)))
    return [(lens.range.start.line, lens.command.title) for lens in found or [] if lens.command and status(lens)]


async def hover(client: LanguageClient, uri: str, line1: int, character: int) -> str:
    h = await client.text_document_hover_async(T.HoverParams(T.TextDocumentIdentifier(uri),
                                                             T.Position(line1 - 1, character)))
    if h is None:
        return ""
    assert isinstance(h.contents, T.MarkupContent)
    return h.contents.value


async def cost_hints(client: LanguageClient, uri: str, text: str) -> dict[int, tuple[int, str, str]]:
    """1-based line -> (character, label, tooltip) of the cost hints (the ones starting with ≈)."""
    n = len(text.split("\n"))
    hints = await client.text_document_inlay_hint_async(T.InlayHintParams(
        T.TextDocumentIdentifier(uri), T.Range(T.Position(0, 0), T.Position(n, 0))))
    out = {}
    for h in hints or []:
        if isinstance(h.label, str) and h.label.startswith("≈"):
            out[h.position.line + 1] = (h.position.character, h.label, str(h.tooltip))
    return out


def line(text: str, line1: int) -> str:
    return text.split("\n")[line1 - 1]


def end(text: str, line1: int) -> int:
    return len(line(text, line1).rstrip())


def col(text: str, line1: int, needle: str) -> int:
    return line(text, line1).index(needle) + 1
