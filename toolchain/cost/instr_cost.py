"""Engine cycles of one instruction, from the documented cost formulas (nki-language.md §5
"Instruction cost formulas"; latency-ground-truth.md "Cost formulas").

``N`` is the free elements per partition of the output (of the input for reductions, statistics and
max8). The formulas give the cycles an instruction keeps its engine busy when instructions stream
back to back; the per-instruction fixed overhead (a FREE constant) and the conversion to ns by the
engine clock are applied by the scheduler, so everything here is constant-free and cached once per trace.

Special cases: fp32 matmul x4; LoadStationary cycles (``ls_cycles``: paid only when the stationary
operand differs from the previous matmul's and cannot load in the background — the scheduler
decides); sin/cos ~4.8x exp; bf16 fast paths (tensor_tensor add/mul/sub, scalar_tensor_tensor
subtract-multiply, tensor_reduce add/max, zero memset); v3+ VectorE perf mode; v4 ScalarE 2x mode.
Composite ``nl`` calls (softmax, rms_norm) are the sum of the instructions the compiler emits for them.

Imports only the trace format, ``hardware``, ``engines`` and ``dma``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..sim.trace import Access, Instr
from . import engines as E
from .dma import DmaShape, dma_shape
from .hardware import (
    DYNAMIC_COPY_MIN_CYCLES,
    FP32_MATMUL_FACTOR,
    GPSIMD_RSQRT_FACTOR,
    GPSIMD_START_CYCLES,
    LOAD_STATIONARY_SPEEDUP,
    MIN_II_CYCLES,
    SIN_COS_FACTOR,
    Hardware,
)

MIN_II = MIN_II_CYCLES
_BF16ISH = ("bfloat16", "float16")
_FAST_TT_OPS = ("add", "multiply", "subtract")  # [NL] §5 tensor_tensor row: all-bf16 add/mul/sub


@dataclass(slots=True)
class InstrCost:
    """Cost facts of one instruction (no constants applied)."""

    cycles: float = 0.0  # formula cycles on the lane's engine
    ls_cycles: float = 0.0  # TensorE LoadStationary cycles, if the stationary has to be (re)loaded
    stationary: tuple[int, int, int] | None = None  # (storage, lo, hi) of the stationary operand
    flops: float = 0.0
    pe_kind: str = "bf16"  # PE rate kind of a matmul ("bf16", "fp32", "double_row", "mx")
    dma: DmaShape | None = None


# --- the formulas (engine cycles), one per row of the §5 table --------------------------------------------
def matmul_cycles(n_stationary: int, n_moving: int, fp32: bool = False) -> float:
    """nc_matmul: max(min(64, N_stationary), N_moving); fp32 inputs x4 ([NL] §5 nc_matmul row)."""
    c = float(max(min(64, n_stationary), n_moving))
    return c * FP32_MATMUL_FACTOR if fp32 else c


def load_stationary_cycles(n_stationary: int, fp32: bool = False) -> float:
    """LoadStationary: up to 4x faster than a MultiplyMoving of the same free size ([NL] §5 LoadStationary row)."""
    c = n_stationary / LOAD_STATIONARY_SPEEDUP
    return c * FP32_MATMUL_FACTOR if fp32 else c


def pe_transpose_cycles(p: int, f: int) -> float:
    """TensorE nc_transpose of [P, F]: max(P, min(64, F)) ([NL] §5 nc_transpose row)."""
    return float(max(p, min(64, f)))


def activation_cycles(n: int, reduce: bool = False, sin_cos: bool = False) -> float:
    """ScalarE activation: max(MIN_II, N); activation_reduce + MIN_II ([NL] §5 activation row);
    sin/cos ~4.8x exp ([LG] "Calibration checks")."""
    c = float(max(MIN_II, n))
    if sin_cos:
        c *= SIN_COS_FACTOR
    return c + MIN_II if reduce else c


def tensor_tensor_cycles(n: int, psum_operand: bool = False, bf16_fast: bool = False) -> float:
    """tensor_tensor: max(MIN_II, N) with a PSUM operand or all-bf16 unit-stride add/mul/sub, else
    max(MIN_II, 2N) ([NL] §5 tensor_tensor row)."""
    return float(max(MIN_II, n if (psum_operand or bf16_fast) else 2 * n))


def tensor_scalar_cycles(n: int) -> float:
    """tensor_scalar, tensor_copy, memset, dropout, nc_stream_shuffle, range_select: max(MIN_II, N)."""
    return float(max(MIN_II, n))


def memset_cycles(n: int, zero_16bit: bool = False) -> float:
    """memset: max(MIN_II, N); zero in bf16/fp16: N/2 ([NL] §5 tensor_scalar/.../memset row)."""
    return float(max(MIN_II, n / 2 if zero_16bit else n))


def scalar_tensor_tensor_cycles(n: int, fast: bool = False) -> float:
    """scalar_tensor_tensor: N for bf16 data/operand1 with subtract-multiply and even N, else 2N."""
    return float(n if fast else 2 * n)


def tensor_reduce_cycles(n: int, bf16_fast: bool = False) -> float:
    """tensor_reduce: N/2 for bf16->bf16 add/max, else N ([NL] §5 tensor_reduce row)."""
    return n / 2 if bf16_fast else float(n)


def scan_cycles(n: int) -> float:
    """tensor_tensor_scan: max(MIN_II, 2N) ([NL] §5 tensor_tensor_scan row)."""
    return float(max(MIN_II, 2 * n))


def tensor_scalar_reduce_cycles(n: int) -> float:
    """tensor_scalar_reduce: max(MIN_II, N) + MIN_II ([NL] §5 tensor_tensor_scan row)."""
    return float(max(MIN_II, n) + MIN_II)


def bn_stats_cycles(n: int) -> float:
    """bn_stats: max(MIN_II, N) ([NL] §5 bn_stats / bn_aggr row)."""
    return float(max(MIN_II, n))


def bn_aggr_cycles(n: int) -> float:
    """bn_aggr: max(MIN_II, 13N/3) ([NL] §5 bn_stats / bn_aggr row)."""
    return max(float(MIN_II), 13 * n / 3)


def reciprocal_cycles(n: int) -> float:
    """VectorE reciprocal: max(MIN_II, 8N) ([NL] §5 reciprocal row)."""
    return float(max(MIN_II, 8 * n))


def gpsimd_cycles(n: int) -> float:
    """iota / affine_select: 150 + N GpSimd cycles ([NL] §5 iota / affine_select row)."""
    return float(GPSIMD_START_CYCLES + n)


def copy_predicated_cycles(n: int, both_sbuf: bool) -> float:
    """tensor_copy_predicated: N if src and predicate are in different memories, 2N if both SBUF."""
    return float(2 * n if both_sbuf else n)


def dynamic_copy_cycles(n: int) -> float:
    """tensor_copy_dynamic_*: max(600, N) ([NL] §5 tensor_copy_dynamic_* row)."""
    return float(max(DYNAMIC_COPY_MIN_CYCLES, n))


# --- operand facts ---------------------------------------------------------------------------------------
def _n_out(instr: Instr) -> int:
    return max((w.free_elements for w in instr.writes), default=1)


def _n_in(instr: Instr) -> int:
    return max((r.free_elements for r in instr.reads), default=_n_out(instr))


def _ops(instr: Instr) -> tuple[str, ...]:
    ops = instr.attrs.get("ops")
    if ops:
        return tuple(str(o) for o in ops)
    name = instr.api.partition(".")[2]
    if instr.api == "accumulate":
        return ("add",)
    return ({"sum": "add", "max": "maximum", "min": "minimum"}.get(name, name),) if name else ()


def _unit_stride(a: Access) -> bool:
    elements = 1
    for s in a.shape:
        elements *= s
    item = a.nbytes // elements if elements else a.nbytes
    return a.free_elements <= 1 or a.run >= 2 * item


def _all_16bit(accs: list[Access]) -> bool:
    return bool(accs) and all(a.dtype in _BF16ISH for a in accs)


def _perf_divisor(instr: Instr, lane: int, hw: Hardware) -> float:
    """v3+ VectorE perf mode for tensor_copy / tensor_scalar: 4x if all-SBUF, bf16/fp16 and unit inner
    stride, 2x if two of those hold; v4 ScalarE 2x when all hold ([NL] §5 "Other overheads")."""
    accs = instr.reads + instr.writes
    held = (all(a.buffer == "sbuf" for a in accs), _all_16bit(accs), all(_unit_stride(a) for a in accs))
    n = sum(held)
    if lane == E.VECTOR and hw.vector_perf_mode:
        return 4.0 if n == 3 else 2.0 if n == 2 else 1.0
    if lane == E.SCALAR and hw.scalar_perf_mode and n == 3:
        return 2.0
    return 1.0


# --- per kind --------------------------------------------------------------------------------------------
def _matmul(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    ops = [a for a in instr.reads if a.buffer != "psum"] or instr.reads
    if not ops:
        return _unknown(instr, lane, hw, kind)
    s = ops[0]
    m = ops[1] if len(ops) > 1 else ops[0]
    fp32 = s.dtype == "float32" or m.dtype == "float32"
    extra = 0.0
    pe_kind = "fp32" if fp32 else "bf16"
    if kind == E.K_NL_MATMUL and not instr.attrs.get("transpose_x", False):
        k, n_stat = s.free_elements, s.partitions  # x is [M, K]: the compiler transposes it on the PE first
        extra = pe_transpose_cycles(s.partitions, s.free_elements)
    else:
        k, n_stat = s.partitions, s.free_elements
    n_mov = m.free_elements
    if kind == E.K_MATMUL and "double_row" in str(instr.attrs.get("perf_mode", "")):
        k, n_stat, n_mov = 2 * k, max(1, n_stat // 2), max(1, n_mov // 2)  # [K, 2, M] x [K, 2, N]
        pe_kind = "double_row"
    elif kind == E.K_MATMUL_MX:
        k, pe_kind = 4 * k, "mx"  # *_x4 data: contraction = P x 4 ([NL] §3.1 nc_matmul_mx)
    cycles = matmul_cycles(n_stat, n_mov, fp32) + extra
    return InstrCost(cycles=cycles, ls_cycles=load_stationary_cycles(n_stat, fp32),
                     stationary=(s.storage, s.lo, s.hi), flops=2.0 * k * n_stat * n_mov, pe_kind=pe_kind)


def _pe_transpose(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    if not instr.reads:
        return _unknown(instr, lane, hw, kind)
    d = instr.reads[0]
    # implemented as a matmul with the data as stationary: it replaces the loaded stationary
    return InstrCost(cycles=pe_transpose_cycles(d.partitions, d.free_elements), stationary=(d.storage, d.lo, d.hi))


def _pe_broadcast(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    # ones[1, P].T @ row[1, F]: the row is the moving operand (N_moving = F), ones the stationary
    row = instr.reads[0]
    out = instr.writes[0]
    return InstrCost(cycles=matmul_cycles(out.partitions, row.free_elements, row.dtype in ("float32", "tfloat32")))


def _activation(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    n = max(_n_in(instr), _n_out(instr))
    ops = _ops(instr)
    reduce = (instr.api.endswith("activation_reduce") or len(instr.writes) > 1
              or str(instr.attrs.get("reduce_cmd", "idle")) not in ("idle", "0"))
    return InstrCost(cycles=activation_cycles(n, reduce, any(o in ("sin", "cos") for o in ops)))


def _exponential(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    # [NL] §3.2 exponential (v4): 4x ScalarE exp throughput
    return InstrCost(cycles=max(float(MIN_II), _n_out(instr) / 4))


def _tensor_tensor(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    n = _n_out(instr)
    accs = instr.reads + instr.writes
    psum = any(a.buffer == "psum" for a in instr.reads) or bool(instr.attrs.get("psum_operand")) or (
        kind == E.K_ACCUMULATE and any(w.buffer == "psum" for w in instr.writes))
    fast = (all(o in _FAST_TT_OPS for o in _ops(instr)) and _all_16bit(accs)
            and all(a.buffer == "sbuf" and _unit_stride(a) for a in accs))
    c = tensor_tensor_cycles(n, psum, fast)
    if lane == E.VECTOR and hw.vector_perf_mode and _all_16bit(instr.reads) and all(
            a.buffer == "sbuf" for a in instr.reads):
        c = max(float(MIN_II), c / 2)  # [NL] §5 "Other overheads": v3 tensor_tensor 2x for all-bf16/fp16 SBUF
    return InstrCost(cycles=c)


def _tensor_scalar(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    n = _n_out(instr)
    c = max(float(MIN_II), n / _perf_divisor(instr, lane, hw))
    if lane == E.GPSIMD and "rsqrt" in _ops(instr):
        c *= GPSIMD_RSQRT_FACTOR
    return InstrCost(cycles=c)


def _memset(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    name = instr.api.partition(".")[2]
    zero = name in ("zeros", "zeros_like") or (name == "memset" and instr.attrs.get("value", None) in (0, 0.0))
    return InstrCost(cycles=memset_cycles(_n_out(instr), zero and _all_16bit(instr.writes)))


def _stt(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    n = _n_out(instr)
    ops = _ops(instr)
    fast = (len(instr.reads) >= 2 and instr.reads[0].dtype == "bfloat16" and instr.reads[-1].dtype == "bfloat16"
            and ops[:2] == ("subtract", "multiply") and n % 2 == 0)
    return InstrCost(cycles=scalar_tensor_tensor_cycles(n, fast))


def _reduce(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    ops = _ops(instr)
    op = ops[0] if ops else ""
    fast = (op in ("add", "max", "maximum") and bool(instr.reads) and instr.reads[0].dtype == "bfloat16"
            and all(w.dtype == "bfloat16" for w in instr.writes))
    c = tensor_reduce_cycles(_n_in(instr), fast)
    if instr.api == "nl.var":
        c += bn_aggr_cycles(6)  # variance: statistics then aggregation (bn_stats + bn_aggr)
    return InstrCost(cycles=c)


def _softmax(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    n = _n_in(instr)
    on_vector = 2 * tensor_reduce_cycles(n) + tensor_scalar_cycles(n)  # max, sum, scale by 1/sum
    exp_in_vector_cycles = activation_cycles(n) * hw.vector_ghz / hw.scalar_ghz  # exp(x - max) on ScalarE
    return InstrCost(cycles=on_vector + exp_in_vector_cycles)


def _rms_norm(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    n = _n_in(instr)
    square_sum = activation_cycles(n, reduce=True) * hw.vector_ghz / hw.scalar_ghz  # ScalarE square + sum
    return InstrCost(cycles=square_sum + tensor_scalar_cycles(n) + tensor_tensor_cycles(n))


def _scan(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    return InstrCost(cycles=scan_cycles(_n_out(instr)))


def _ts_reduce(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    return InstrCost(cycles=tensor_scalar_reduce_cycles(_n_in(instr)))


def _bn_stats(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    return InstrCost(cycles=bn_stats_cycles(_n_in(instr)))


def _bn_aggr(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    return InstrCost(cycles=bn_aggr_cycles(_n_in(instr)))


def _reciprocal(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    return InstrCost(cycles=reciprocal_cycles(_n_out(instr)))


def _gpsimd(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    n = max(_n_out(instr), _n_in(instr) if instr.reads else 0)  # partition reduce / gathers: the larger side
    return InstrCost(cycles=gpsimd_cycles(n))


def _dynamic(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    return InstrCost(cycles=dynamic_copy_cycles(_n_out(instr)))


def _vector_transpose(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    return InstrCost(cycles=tensor_scalar_cycles(_n_out(instr)))  # [NL] §5 nc_transpose row: VectorE max(MIN_II, N)


def _max8(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    n = _n_in(instr)  # [NL] §5 max8 row: N (match_replace8 read as max(MIN_II, N): the doc's min is a typo)
    return InstrCost(cycles=float(max(MIN_II, n) if instr.api.endswith("match_replace8") else n))


def _copy_predicated(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    both = len(instr.reads) >= 2 and all(a.buffer == "sbuf" for a in instr.reads[:2])
    return InstrCost(cycles=copy_predicated_cycles(_n_out(instr), both))


def _dma(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    return InstrCost(dma=dma_shape(instr, transpose=kind == E.K_DMA_TRANSPOSE))


def _unknown(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    # not in the §5 table: a two-input VectorE op is the conservative guess
    return InstrCost(cycles=tensor_tensor_cycles(max(_n_in(instr), _n_out(instr))))


def _free(instr: Instr, lane: int, hw: Hardware, kind: str) -> InstrCost:
    return InstrCost()


Formula = Callable[[Instr, int, Hardware, str], InstrCost]

_FORMULAS: dict[str, Formula] = {
    E.K_MATMUL: _matmul, E.K_MATMUL_MX: _matmul, E.K_NL_MATMUL: _matmul, E.K_PE_TRANSPOSE: _pe_transpose,
    E.K_VEC_TRANSPOSE: _vector_transpose, E.K_ACTIVATION: _activation, E.K_EXPONENTIAL: _exponential,
    E.K_TENSOR_TENSOR: _tensor_tensor, E.K_ACCUMULATE: _tensor_tensor, E.K_TENSOR_SCALAR: _tensor_scalar,
    E.K_COPY: _tensor_scalar, E.K_MEMSET: _memset, E.K_STT: _stt, E.K_REDUCE: _reduce,
    E.K_SCAN: _scan, E.K_TS_REDUCE: _ts_reduce, E.K_BN_STATS: _bn_stats, E.K_BN_AGGR: _bn_aggr,
    E.K_RECIPROCAL: _reciprocal, E.K_COPY_PRED: _copy_predicated, E.K_DYN_COPY: _dynamic, E.K_GPSIMD: _gpsimd,
    E.K_MAX8: _max8,
    E.K_SOFTMAX: _softmax, E.K_RMSNORM: _rms_norm, E.K_DMA: _dma, E.K_DMA_TRANSPOSE: _dma,
    E.K_FREE: _free, E.K_UNKNOWN: _unknown, E.K_PE_BROADCAST: _pe_broadcast,
}


def cost(instr: Instr, lane: int, kind: str, hw: Hardware) -> InstrCost:
    """The ``InstrCost`` of one instruction classified as ``(lane, kind)`` by ``engines.classify``."""
    fn = _FORMULAS.get(kind, _unknown)
    return fn(instr, lane, hw, kind)
