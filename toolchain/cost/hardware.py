"""Per-target performance constants of one NeuronCore, and the calibratable ``Constants`` of the model.

This module owns every number the cost model uses. Two kinds:

* ``Hardware`` — documented facts of a NeuronCore generation (clocks, TensorE width, DMA engines and
  bandwidth, SBUF capacity, instruction-cost constants such as ``MIN_II``). They are not fitted.
* ``Constants`` — the FREE parameters: quantities the documents give only roughly ("about 1300 ns",
  "~100 cycles", "tiny kernels floor at about 15-20 us") or not at all (how the DMA efficiency curve
  bends). Defaults come from the documents; ``calibration.fit`` may override them per target.

Sources (the only ones used; each constant names its row):
  [LG] the latency research notes ("Hardware facts" / "Cost formulas" / "Calibration checks"), which
       summarise the AWS Neuron SDK's architecture guides (nki/guides/architecture/*_arch.rst), the DMA
       bandwidth guide (nki/deep-dives/nki-dma-bandwidth-guide.rst), the performance guide
       (nki_perf_guide.rst) and the ISA docs' "Estimated instruction cost" text (nki/api/nki/isa, SDK 2.26)
  [NL] the NKI language notes, section 5 ("Hardware numbers" table, "Instruction cost formulas"
       table and "Other overheads"), summarising the same SDK documents (sdk 2.26 and 2.32)
  [TG] toolchain/facts/targets.py (usable SBUF per partition, itself from KLR Trace.lean)

It imports nothing from the simulator and nothing from pydantic.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from nki_agent.toolchain.facts.targets import get_target

# --- instruction-cost constants shared by every generation ------------------------------------------------
MIN_II_CYCLES = 64  # [NL] §5 "Instruction cost formulas": MIN_II ≈ 64 cycles; [LG] "Cost formulas": MIN_II ≈ 64
MM_INIT_LATENCY_CYCLES = 64  # [NL] §5 LoadStationary row: MM turnaround MM_INIT_LATENCY = 64 cycles (v2)
LOAD_STATIONARY_SPEEDUP = 4.0  # [NL] §5 LoadStationary row: "up to 4x faster than a MultiplyMoving of the same free size"
FP32_MATMUL_FACTOR = 4.0  # [NL] §5 nc_matmul row: "fp32 inputs x4"; [LG] "Cost formulas": x4 for fp32
GPSIMD_START_CYCLES = 150  # [NL] §5 iota / affine_select row: 150 + N, GPSIMD_START ≈ 150
DYNAMIC_COPY_MIN_CYCLES = 600  # [NL] §5 tensor_copy_dynamic_* row: max(600, N)
SBUF_ACCESS_CYCLES = 60  # [NL] §5 "Other overheads": SBUF/PSUM access request static overhead ≈ 60 cycles (v2)
STATIC_OVERHEAD_CYCLES = 100  # [NL] §5 "Other overheads": ~100 cycles static overhead per instruction (v2 arch guide)
SIN_COS_FACTOR = 4.8  # [LG] "Calibration checks": sin and cos are special-cased at about 4.8x exp
GPSIMD_RSQRT_FACTOR = 4.0  # [NL] §5 reciprocal row: GpSimd rsqrt 4x slower than ScalarE
DMA_TRANSPOSE_HBM_FACTOR = 0.9  # [NL] §5 "Other overheads": DMA transpose ≈ 90% (HBM->SBUF) of copy throughput
DMA_TRANSPOSE_SBUF_FACTOR = 0.5  # [NL] §5 "Other overheads": ... and 50% (SBUF->SBUF)
DMA_SATURATE_ROW_BYTES = 4096  # [NL] §5 "Other overheads" / [LG] DMA: >= 4 KiB per partition saturates
DMA_RECOMMENDED_ROW_BYTES = 2048  # [NL] §5 / [LG] DMA: >= 2 KiB per partition recommended (minimum payload)
DMA_SMALL_ROW_BYTES = 256  # [NL] §5 "Other overheads": < 256 B per partition is far below peak
PE_ROWS = 128  # [NL] §5 Hardware numbers: PE array 128x128
PE_COLS = 128
FLOPS_PER_PE_CYCLE = 2 * PE_ROWS * PE_COLS  # [LG] "MFU constants": flops/cycle 2·128·128
# TensorE throughput of a matmul kind relative to bf16 ([NL] §5 TensorE clock/width and peak rows):
PE_RATE = {
    "bf16": 1.0,  # 2x128 in per cycle for bf16/fp16/tf32/fp8 (92 / 79 / 79 TFLOPS)
    "fp32": 1.0 / FP32_MATMUL_FACTOR,  # 23 / 20 / 20 TFLOPS
    "double_row": 2.0,  # v3/v4 fp8 double-row: 4x128 dense fp8 (158 TFLOPS on trn2)
    "mx": 4.0,  # v4 nc_matmul_mx: 8x128 MXFP8 dense (315 TFLOPS)
}


@dataclass(frozen=True)
class Hardware:
    """Documented performance facts of one NeuronCore generation (not fitted)."""

    target: str
    generation: int  # nc_version: 2 = trn1 (NeuronCore-v2), 3 = trn2 (v3), 4 = trn3 (v4)
    tensor_ghz: float
    vector_ghz: float
    scalar_ghz: float
    gpsimd_ghz: float
    dma_engines: int  # DMA engines per NeuronCore
    dma_queues: int  # queues a transfer can be put on (one lane each in the estimate)
    dma_partitions_per_engine: int  # one transfer spreads over the engines, each serving this many partitions
    dma_engine_bytes_per_ns: float  # achievable bandwidth of one DMA engine
    hbm_device_bytes_per_ns: float  # HBM peak of the whole device
    cores_per_device: int
    sbuf_bytes: int  # usable SBUF of one core (128 partitions x usable bytes per partition)
    vector_perf_mode: bool  # v3+ VectorE perf mode (bf16/fp16, all-SBUF, unit stride copies 2-4x faster)
    scalar_perf_mode: bool  # v4 ScalarE 2x mode for tensor_scalar / tensor_copy
    shared_ports: bool  # v2: VectorE+GpSimd share SBUF access, VectorE+ScalarE share PSUM access

    @property
    def dma_aggregate_bytes_per_ns(self) -> float:
        """Per-core DMA ceiling: engines x per-engine bandwidth (272 / 368 / 528 GB/s = B/ns)."""
        return self.dma_engines * self.dma_engine_bytes_per_ns

    @property
    def hbm_core_bytes_per_ns(self) -> float:
        """One core's share of the device's HBM peak (reported, never used as the DMA cap)."""
        return self.hbm_device_bytes_per_ns / self.cores_per_device

    def tensor_peak_flops_per_ns(self, kind: str = "bf16") -> float:
        """TensorE peak for a matmul kind: 2·128·128 flops per cycle at the TensorE clock ("bf16": the
        bf16/fp16/tf32/fp8 rate), x PE_RATE[kind] ("fp32" 1/4, "double_row" 2, "mx" 4)."""
        return FLOPS_PER_PE_CYCLE * self.tensor_ghz * PE_RATE.get(kind, 1.0)

    def clock_ghz(self, lane: int) -> float:
        """Clock of a compute lane (0 TensorE, 1 VectorE, 2 ScalarE, 3 GpSimd)."""
        return (self.tensor_ghz, self.vector_ghz, self.scalar_ghz, self.gpsimd_ghz)[lane]


def _sbuf(target: str) -> int:
    return 128 * get_target(target).sbuf_bytes_per_partition  # [TG] usable bytes per partition x 128 partitions


TRN1 = Hardware(
    target="trn1", generation=2,
    tensor_ghz=2.8,  # [NL] §5 TensorE clock row: 2.8 GHz (trn1); [LG] NC-v2: TensorE 2.8 GHz
    vector_ghz=1.12,  # [NL] §5 VectorE row: 1.12 GHz; [LG] NC-v2: Vector 1.12 GHz
    scalar_ghz=1.4,  # [NL] §5 ScalarE row: 1.4 GHz; [LG] NC-v2: Scalar 1.4 GHz
    gpsimd_ghz=1.4,  # [NL] §5 GpSimdE row: 1.4 GHz; [LG] NC-v2: GpSimd 1.4 GHz
    dma_engines=16,  # [NL] §5 DMA engines row: 16 per NC; [LG] NC-v2: 16 per NC
    dma_queues=16,  # [NL] §5 "Engines": 16 engines per NC x 16 queues each; a transfer uses one queue slot
    dma_partitions_per_engine=8,  # [NL] §5 "Engines": one DMA transfer spreads over 16 engines, each serving 8 partitions
    dma_engine_bytes_per_ns=17.0,  # [NL] §5 DMA BW per engine row: 17 B/ns achievable (trn1); [LG] DMA: trn1 17 B/ns
    hbm_device_bytes_per_ns=820.0,  # [NL] §5 HBM row: 820 GB/s per device (trn1); [LG] NC-v2: 820 GB/s
    cores_per_device=2,  # [NL] §5 NCs per device row: 2
    sbuf_bytes=_sbuf("trn1"),  # [TG] 180224 B per partition; [NL] §5 SBUF row: 24 MiB = 128 x 192 KiB
    vector_perf_mode=False,  # [NL] §5 "Other overheads": the perf mode is v3's
    scalar_perf_mode=False,
    shared_ports=True,  # [NL] §5 "v2-only contention"
)

TRN2 = Hardware(
    target="trn2", generation=3,
    tensor_ghz=2.4,  # [NL] §5 TensorE clock row: 2.4 GHz (trn2); [LG] NC-v3: Tensor 2.4
    vector_ghz=0.96,  # [NL] §5 VectorE row: 0.96 GHz; [LG] NC-v3: Vector 0.96
    scalar_ghz=1.2,  # [NL] §5 ScalarE row: 1.2 GHz; [LG] NC-v3: Scalar 1.2
    gpsimd_ghz=1.2,  # [NL] §5 GpSimdE row: 1.2 GHz
    dma_engines=16,  # [NL] §5 DMA engines row: 16 per NC
    dma_queues=16,  # [NL] §5 "Engines": 16 queues per engine
    dma_partitions_per_engine=8,  # [NL] §5 "Engines": each engine serves 8 partitions
    dma_engine_bytes_per_ns=23.0,  # [NL] §5 DMA BW per engine row: 23 B/ns (trn2); [LG] DMA: trn2 23 B/ns
    hbm_device_bytes_per_ns=3000.0,  # [NL] §5 HBM row: 3 TB/s (newer doc); [LG] NC-v3: 3 TB/s
    cores_per_device=8,  # [NL] §5 NCs per device row: 8
    sbuf_bytes=_sbuf("trn2"),  # [TG] 212984 B per partition; [NL] §5 SBUF row: 28 MiB
    vector_perf_mode=True,  # [NL] §5 "Other overheads": v3 VectorE perf mode
    scalar_perf_mode=False,
    shared_ports=False,  # [NL] §5: both restrictions lifted on v3
)

TRN3 = Hardware(
    target="trn3", generation=4,
    tensor_ghz=2.4,  # [NL] §5 TensorE clock row: 2.4 GHz (trn3)
    vector_ghz=1.2,  # [NL] §5 VectorE row: 1.2 GHz (trn3)
    scalar_ghz=1.2,  # [NL] §5 ScalarE row: 1.2 GHz (trn3)
    gpsimd_ghz=1.2,  # [NL] §5 GpSimdE row: 1.2 GHz (trn3)
    dma_engines=16,  # [NL] §5 DMA engines row: 16 per NC
    dma_queues=16,  # [NL] §5 "Engines": 16 queues per engine
    dma_partitions_per_engine=8,  # [NL] §5 "Engines"
    dma_engine_bytes_per_ns=33.0,  # [NL] §5 DMA BW per engine row: 33 B/ns (trn3); [LG] DMA: trn3 33 B/ns
    hbm_device_bytes_per_ns=4700.0,  # [NL] §5 HBM row: 4.7 TB/s; [LG] NC-v4: 4.7 TB/s
    cores_per_device=8,  # [NL] §5 NCs per device row: 8
    sbuf_bytes=_sbuf("trn3"),  # [TG] 245752 B per partition; [NL] §5 SBUF row: 32 MiB
    vector_perf_mode=True,  # [NL] §5 VectorE row: 512 bf16/fp16 or 256 other elements/cycle, as v3
    scalar_perf_mode=True,  # [NL] §5 "Other overheads": v4 ScalarE gets the 2x mode for tensor_scalar/tensor_copy
    shared_ports=False,
)

HARDWARE: dict[str, Hardware] = {h.target: h for h in (TRN1, TRN2, TRN3)}


def hardware_for(target: str | None) -> Hardware:
    """The ``Hardware`` of a target name or alias (``targets.get_target`` resolves aliases, raises ValueError)."""
    return HARDWARE[get_target(target).name]


@dataclass(frozen=True)
class Constants:
    """The model's FREE parameters (calibratable), with the documented defaults.

    Each is a quantity the documents give only approximately; ``calibration.fit`` searches each within
    [0.2x, 5x] of its default. ``source`` names the calibration file they came from ("" = defaults).
    """

    # Fixed cost of one kernel launch, added once to the makespan.
    # [LG] "Calibration checks": tiny kernels floor at about 15-20 us (lower end).
    launch_overhead_us: float = 15.0
    # Latency from a DMA's trigger to its first byte moving (descriptor processing, semaphores); overlaps
    # with other transfers' data. [NL] §5 "Other overheads": ~1300 ns semaphore-to-start; [LG] DMA: ~1300 ns.
    dma_fixed_ns: float = 1300.0
    # Knee of the DMA efficiency curve: a descriptor row of r bytes runs at r / (r + knee) of peak,
    # normalised to 1 at 4 KiB. 512 B gives < 40% at 256 B, ~90% at 2 KiB, 100% at 4 KiB, which is how
    # [NL] §5 "Other overheads" describes it (far below peak / recommended / saturates) — an [I] choice.
    dma_knee_bytes: float = 512.0
    # Per-instruction fixed cost of each engine, in that engine's cycles: it bounds how fast tiny
    # instructions issue and is paid in full by an instruction that waits on its producer.
    # TensorE: [NL] §5 LoadStationary row, MM_INIT_LATENCY = 64 cycles.
    tensor_fixed_cycles: float = float(MM_INIT_LATENCY_CYCLES)
    # Vector / Scalar / GpSimd: [NL] §5 "Other overheads", ~100 cycles static overhead per instruction.
    vector_fixed_cycles: float = float(STATIC_OVERHEAD_CYCLES)
    scalar_fixed_cycles: float = float(STATIC_OVERHEAD_CYCLES)
    gpsimd_fixed_cycles: float = float(STATIC_OVERHEAD_CYCLES)
    # Bytes of DMA traffic per byte of SBUF over capacity (spill store + reload = 2). [NL] §7 item 2:
    # "the compiler spills/reloads when live data exceeds SBUF/PSUM" — the factor is an [I] default.
    spill_factor: float = 2.0
    source: str = ""  # the calibration file applied ("" = the documented defaults)

    def fixed_cycles(self, lane: int) -> float:
        """The fixed cost of compute lane ``lane`` (0 TensorE, 1 VectorE, 2 ScalarE, 3 GpSimd)."""
        return (self.tensor_fixed_cycles, self.vector_fixed_cycles, self.scalar_fixed_cycles,
                self.gpsimd_fixed_cycles)[lane]

    def free_values(self) -> dict[str, float]:
        """The free parameters by name."""
        return {k: float(getattr(self, k)) for k in FREE}

    def with_values(self, values: dict[str, float], source: str | None = None) -> Constants:
        """A copy with some free parameters replaced (unknown names raise ValueError)."""
        bad = sorted(set(values) - set(FREE))
        if bad:
            raise ValueError(f"unknown cost-model constants: {', '.join(bad)} (free: {', '.join(FREE)})")
        changes: dict[str, object] = {k: float(v) for k, v in values.items()}
        if source is not None:
            changes["source"] = source
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


FREE: tuple[str, ...] = ("launch_overhead_us", "dma_fixed_ns", "dma_knee_bytes", "tensor_fixed_cycles",
                         "vector_fixed_cycles", "scalar_fixed_cycles", "gpsimd_fixed_cycles", "spill_factor")


def constants_for(target: str | None = None) -> Constants:
    """The documented default constants of a target (the same for every generation: the documents give
    these overheads without a per-generation split)."""
    hardware_for(target)  # validates the name
    return Constants()
