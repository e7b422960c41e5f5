"""Per-target hardware limits (trn1 / trn2 / trn3) used by the simulator and the checks.

Numbers come from the NKI docs (tile_size, architecture guides) as summarised in
docs/nki-semantics.md; each constant carries the reason it has the value it has.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """Hardware facts of one NeuronCore generation that kernels can violate."""

    name: str
    nc_version: int  # gen2 = trn1/inf2, gen3 = trn2, gen4 = trn3 (nisa.nc_version)
    pmax: int  # partitions per SBUF/PSUM tile (tile_size.pmax)
    sbuf_bytes_per_partition: int  # usable SBUF per partition (tile_size.total_available_sbuf_size)
    psum_bytes_per_partition: int  # 8 banks x 2 KiB
    psum_bank_bytes: int  # one accumulation group lives in one bank
    psum_banks: int
    gemm_stationary_fmax: int  # stationary free size (output partitions) of nc_matmul
    gemm_moving_fmax: int  # moving free size (output free size) of nc_matmul, fp32 destination
    gemm_moving_fmax_bf16: int  # same with a bf16 PSUM destination (gen4 only)
    bn_stats_fmax: int  # bn_stats free-size limit
    matmul_dst_dtypes: tuple[str, ...]  # dtypes a matmul may write into PSUM
    matmul_input_dtypes: tuple[str, ...]  # dtypes TensorE accepts as operands
    vector_transpose_max: int  # VectorE nc_transpose is 32x32
    max_lnc: int  # logical NeuronCore degree supported by kernel[lnc](...)


_COMMON_MM_INPUTS = ("float8_e4m3", "float8_e5m2", "bfloat16", "float16", "tfloat32", "float32")

TRN1 = Target(
    name="trn1",
    nc_version=2,
    pmax=128,  # 128 SBUF partitions on every generation
    sbuf_bytes_per_partition=180224,  # 192 KiB minus the compiler-reserved region (KLR Trace.lean)
    psum_bytes_per_partition=16384,  # 2 MiB PSUM / 128 partitions
    psum_bank_bytes=2048,  # 512 fp32 elements per bank
    psum_banks=8,
    gemm_stationary_fmax=128,  # PE array is 128x128
    gemm_moving_fmax=512,  # one PSUM bank of fp32 on gen2/gen3
    gemm_moving_fmax_bf16=512,  # gen2 cannot write bf16 to PSUM at all
    bn_stats_fmax=512,
    matmul_dst_dtypes=("float32",),  # "nc_matmul dst dtype must be float32 on gen2"
    matmul_input_dtypes=_COMMON_MM_INPUTS,
    vector_transpose_max=32,
    max_lnc=1,  # trn1 has no logical NeuronCores
)

TRN2 = Target(
    name="trn2",
    nc_version=3,
    pmax=128,
    sbuf_bytes_per_partition=212984,  # 224 KiB minus reserved (KLR / nkipy HardwareConstants.h)
    psum_bytes_per_partition=16384,
    psum_bank_bytes=2048,
    psum_banks=8,
    gemm_stationary_fmax=128,
    gemm_moving_fmax=512,
    gemm_moving_fmax_bf16=512,
    bn_stats_fmax=512,
    matmul_dst_dtypes=("float32",),  # bf16 PSUM accumulation arrives with gen4
    matmul_input_dtypes=_COMMON_MM_INPUTS,
    vector_transpose_max=32,
    max_lnc=2,
)

TRN3 = Target(
    name="trn3",
    nc_version=4,
    pmax=128,
    sbuf_bytes_per_partition=245752,  # 256 KiB minus reserved (KLR / nkipy)
    psum_bytes_per_partition=16384,
    psum_bank_bytes=2048,
    psum_banks=8,
    gemm_stationary_fmax=128,
    gemm_moving_fmax=4096,  # gen4 nc_matmul: N up to 4096 with an fp32 destination
    gemm_moving_fmax_bf16=8192,  # and 8192 with a bf16 destination
    bn_stats_fmax=512,
    matmul_dst_dtypes=("float32", "bfloat16"),
    matmul_input_dtypes=_COMMON_MM_INPUTS + ("float8_e4m3fn",),
    vector_transpose_max=32,
    max_lnc=2,
)

TARGETS: dict[str, Target] = {t.name: t for t in (TRN1, TRN2, TRN3)}
ALIASES = {"inf2": "trn1", "gen2": "trn1", "gen3": "trn2", "gen4": "trn3"}
DEFAULT_TARGET = "trn1"  # the paper's platform, and the strictest limits


def get_target(name: str | None) -> Target:
    """Return the target for a name or alias; raises ValueError listing the valid names."""
    key = (name or DEFAULT_TARGET).lower()
    key = ALIASES.get(key, key)
    if key not in TARGETS:
        raise ValueError(f"unknown target {name!r}; expected one of {', '.join(TARGETS)}")
    return TARGETS[key]


AUTO = "auto"
# the simulator's target when nothing names one: the new API's simulator defaults to trn3 without hardware
# (nki.simulate docs); classic kernels to trn1 (the paper's platform)
GENERATION_DEFAULT = {"classic": "trn1", "new": "trn3"}


def environment_target() -> str | None:
    """The target the environment names (``NEURON_PLATFORM_TARGET_OVERRIDE``, else ``NKI_AGENT_TARGET``)."""
    return os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE") or os.environ.get("NKI_AGENT_TARGET") or None


def resolve_target(setting: str | None = None, *, task: str | None = None, kernel_option: str | None = None,
                   environment: str | None = None, generation: str = "") -> str:
    """The one rule for which target a kernel is checked, simulated and shown against, first match wins:
    an explicit setting (editor ``nkiAgent.target``, CLI ``--target``; ``auto``/None: none), the task's
    ``TARGET``, the kernel's ``platform_target`` option, the environment
    (``NEURON_PLATFORM_TARGET_OVERRIDE`` / ``NKI_AGENT_TARGET``), then the API generation's default."""
    for name in (setting, task, kernel_option, environment):
        if name and name != AUTO:
            return get_target(name).name if name.lower() in TARGETS or name.lower() in ALIASES else name
    return GENERATION_DEFAULT.get(generation, DEFAULT_TARGET)
