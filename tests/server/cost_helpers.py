"""Hand-built cost-model estimates of ``examples/l2_matmul/kernel_classic.py`` for the server's cost tests.

Lines are those of the example: the ``for m`` / ``for n`` / ``for k`` headers (26, 27, 29), the two loads
(30, 31), the matmul (32) and the store (34); the kernel's ``def`` is line 7.
"""

from __future__ import annotations

from pathlib import Path

from nki_agent.toolchain.protocol_cost import CostEstimate, EngineBusy, LineCost, LoopCost

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
