"""Hand-built cost estimates for the command-line tests (they do not need the cost model to exist).

``estimate(bars=...)`` is a plausible trn1 matmul estimate: four engine lanes and two DMA queues,
top lines and loops, and a timeline of ``bars`` instructions whose every other TensorE bar is on the
critical path. ``hostile_api`` is an API name made of everything an SVG or a terminal could misread.
"""

from __future__ import annotations

from nki_agent.toolchain.protocol.cost import CostEstimate, EngineBusy, LineCost, LoopCost, TimelineBar

HOSTILE_API = '<script>alert("x")</script> & ]]> \x00\x1b[31m [bold]red[/bold] \'q\''
LANES = (("TensorE", "tensor"), ("VectorE", "vector"), ("ScalarE", "scalar"), ("GpSimd", "gpsimd"),
         ("DMA q0", "dma"), ("DMA q1", "dma"))


def timeline(bars: int, latency_us: float, api: str = "nisa.nc_matmul") -> list[TimelineBar]:
    out: list[TimelineBar] = []
    step = latency_us / max(1, bars)
    for i in range(bars):
        lane, _ = LANES[i % len(LANES)]
        out.append(TimelineBar(lane=lane, start_us=i * step, end_us=i * step + step * 0.8,
                               api=api if lane == "TensorE" else "nl.load", line=10 + i % 7,
                               critical=lane == "TensorE" and i % 2 == 0))
    return out


def estimate(bars: int = 40, latency_us: float = 6970.0, api: str = "nisa.nc_matmul",
             notes: tuple[str, ...] = ("SBUF over capacity: spills modelled as DMA",)) -> CostEstimate:
    return CostEstimate(
        target="trn1", latency_us=latency_us, overhead_us=15.0, bound="TensorE",
        engines=[EngineBusy(lane=lane, engine=eng, busy_us=latency_us * f, utilisation=f, instructions=10 * (k + 1))
                 for k, ((lane, eng), f) in enumerate(zip(LANES, (0.92, 0.31, 0.12, 0.0, 0.44, 0.40)))],
        lines=[LineCost(line=10 + k, us=latency_us * s, share=s, engine="tensor", instructions=8, api=api)
               for k, s in enumerate((0.61, 0.2, 0.09, 0.05, 0.02, 0.01, 0.005, 0.004, 0.003, 0.002, 0.001, 0.0005))],
        loops=[LoopCost(line=8, var="k", kind="affine", trips=8, us=latency_us * 0.9, share=0.9, bound="TensorE",
                        hbm_bytes=1 << 22, hbm_utilisation=0.37, flops=1.07e9),
               LoopCost(line=6, var="m", kind="sequential", trips=4, us=latency_us * 0.95, share=0.95, bound="DMA",
                        hbm_bytes=1 << 23, hbm_utilisation=0.52)],
        flops=1.07e9, hbm_bytes=1 << 23, flop_utilisation=0.82, bandwidth_utilisation=0.35, instructions=bars,
        critical_path_us=latency_us * 0.98, timeline=timeline(bars, latency_us, api), notes=list(notes))
