"""The cost model's results on the wire: ``CostEstimate`` and its parts (part of the one typed protocol).

The cost model (``toolchain/cost/``) builds these from a launch's instruction trace; they travel in
``SimulateResult.estimate`` / ``VerifyResult.estimate`` (worker JSON validated in the parent), the
runner's HTTP bodies, the CLI's ``--json`` and the language server's hovers, inlay hints and code lens.
Everything here is an *estimate*: ``Latency(kind="estimated")`` is made from it and never mixed with a
measured latency.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Engine = Literal["tensor", "vector", "scalar", "gpsimd", "dma", "sync"]
Bound = Literal["TensorE", "VectorE", "ScalarE", "GpSimd", "DMA", "overhead"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", ser_json_inf_nan="strings")


class EngineBusy(_Model):
    """Busy time of one engine (or DMA queue) over the whole estimate."""

    lane: str  # "TensorE", "VectorE", "ScalarE", "GpSimd", "DMA q0" ... "DMA q15"
    engine: Engine
    busy_us: float
    utilisation: float  # busy / estimated latency, 0..1
    instructions: int = 0


class LineCost(_Model):
    """Estimated time attributed to one source line (the instructions issued there)."""

    line: int
    us: float
    share: float  # of the estimated latency (critical-path attribution), 0..1
    engine: Engine  # the engine most of the line's time is on
    instructions: int = 0
    api: str = ""  # the line's most expensive API ("nisa.nc_matmul")


class LoopCost(_Model):
    """Estimated time of one loop (all its executions), its bound and how much bandwidth it uses."""

    line: int
    var: str
    kind: str  # affine | sequential | static | range
    trips: int
    us: float
    share: float
    bound: Bound
    hbm_bytes: int = 0
    hbm_utilisation: float = 0.0  # of the target's per-core DMA bandwidth while the loop runs
    flops: float = 0.0


class TimelineBar(_Model):
    """One instruction (or a merged run of them) on one lane of the engine timeline."""

    lane: str
    start_us: float
    end_us: float
    api: str
    line: int
    critical: bool = False


class CostEstimate(_Model):
    """The analytical model's estimate of one kernel launch on one target."""

    target: str
    latency_us: float  # end to end, including the launch overhead
    overhead_us: float  # the fixed launch overhead inside latency_us
    bound: Bound  # what limits the kernel: the busiest engine on the critical path, or the overhead
    engines: list[EngineBusy] = Field(default_factory=list)
    lines: list[LineCost] = Field(default_factory=list)  # most expensive first (at most 200)
    loops: list[LoopCost] = Field(default_factory=list)
    flops: float = 0.0
    hbm_bytes: int = 0
    flop_utilisation: float = 0.0  # of the target's TensorE peak for the kernel's matmul dtype
    bandwidth_utilisation: float = 0.0  # of the target's per-core DMA bandwidth
    instructions: int = 0
    truncated: bool = False  # the trace hit its limit: the estimate covers only the recorded part
    calibration: str = ""  # the calibration file applied ("" = the documented constants)
    critical_path_us: float = 0.0
    timeline: list[TimelineBar] = Field(default_factory=list)  # bounded (at most ~4000 bars), may be empty
    notes: list[str] = Field(default_factory=list)  # e.g. "SBUF over capacity: spills modelled as DMA"
    constants: dict[str, float] = Field(default_factory=dict)  # the model's free constants used (cost.FREE)
    # relative change of latency_us per relative change of each free constant (estimate(..., sensitivities=True);
    # empty otherwise): lets calibration re-predict this estimate under other constants without the trace
    sensitivities: dict[str, float] = Field(default_factory=dict)

    def summary(self) -> str:
        """"≈ 6.97 ms est. trn1, TensorE-bound"."""
        us = self.latency_us
        t = f"{us / 1000:.3g} ms" if us >= 1000 else f"{us:.3g} µs"
        return f"≈ {t} est. {self.target}, {self.bound}-bound"
