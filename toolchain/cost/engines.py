"""Which engine runs a traced instruction, and which cost formula applies: the one place that maps
``Instr.api`` (+ its accesses and attributes) to ``(lane, kind)``.

Lanes: 0 TensorE, 1 VectorE, 2 ScalarE, 3 GpSimd, ``DMA`` (the scheduler picks the queue), ``FREE``
(folded by the compiler: costs nothing). Kinds name a row of the cost table of nki-language.md §5
("Instruction cost formulas"); ``instr_cost.py`` holds the formulas.

Rules (nki-language.md §3 and §5):
- anything that moves data to or from HBM is a DMA (``nl.load``/``nl.store``/``nisa.dma_copy``, an
  assignment or ``nl.copy`` with HBM on either side);
- matmuls and transposes on the PE array are TensorE (``nc_transpose`` unless ``engine=vector``);
- activation functions are ScalarE;
- elementwise, reductions, copies, statistics, ``op.*`` tile operators, unfused ``assign`` /
  ``accumulate`` are VectorE unless ``attrs["engine"]`` names another engine;
- ``iota`` / ``affine_select`` / gathers / partition reductions / ``power`` are GpSimd;
- ``nl.zeros`` (or a memset) of PSUM whose first user is a matmul writing it is FREE (the compiler
  folds the zeroing into the accumulation group's first matmul).
Unknown APIs get a conservative VectorE cost (``UNKNOWN``); the model lists them in its notes.

Imports only the trace format.
"""

from __future__ import annotations

from ..sim.trace import Instr

TENSOR, VECTOR, SCALAR, GPSIMD = 0, 1, 2, 3
DMA = 4  # DMA queues are lanes DMA .. DMA + queues - 1 in the schedule
FREE = -1
COMPUTE_LANES = (TENSOR, VECTOR, SCALAR, GPSIMD)
LANE_NAMES = ("TensorE", "VectorE", "ScalarE", "GpSimd")  # also the ``Bound`` names; DMA lanes are "DMA qN"

# cost kinds (one per row of the §5 cost table, plus composites)
K_DMA = "dma"
K_DMA_TRANSPOSE = "dma_transpose"
K_MATMUL = "matmul"  # nisa.nc_matmul
K_MATMUL_MX = "matmul_mx"  # nisa.nc_matmul_mx (v4): contraction 4 x P
K_NL_MATMUL = "nl_matmul"  # nl.matmul (x @ y; an implicit PE transpose of x unless transpose_x)
K_PE_TRANSPOSE = "pe_transpose"
# nl.broadcast_to of a one-partition tile across partitions: the compiler does it on TensorE (a matmul with
# a ones stationary, result in PSUM) — fused-mamba tutorial, "partition-dimension broadcast of A_i using a
# separate instruction on TensorE"; its consumers then read a PSUM operand (tensor_tensor costs N, not 2N).
# Only a row that one matmul can produce (free size <= the target's moving-operand limit, one PSUM bank
# of fp32 on trn1/trn2: targets.gemm_moving_fmax) goes that way; a wider row is copied across partitions
# on VectorE into SBUF. [I] The tutorial's own figures: mamba v2 (whole-sequence rows) equals v3 (512-wide
# chunks) at seq 512 and is 1.30-1.40x slower from seq 1024 on, before it spills (seq >= 7K).
K_PE_BROADCAST = "pe_broadcast"
K_VEC_TRANSPOSE = "vector_transpose"
K_ACTIVATION = "activation"
K_EXPONENTIAL = "exponential"  # nisa.exponential (v4 VectorE, 4x ScalarE exp throughput)
K_TENSOR_TENSOR = "tensor_tensor"
K_TENSOR_SCALAR = "tensor_scalar"  # one-input elementwise: tensor_scalar, unary VectorE ops, dropout, shuffles
K_COPY = "copy"  # tensor_copy and on-chip assignments (perf-mode eligible like tensor_scalar)
K_MEMSET = "memset"
K_STT = "scalar_tensor_tensor"
K_REDUCE = "tensor_reduce"
K_SCAN = "scan"  # tensor_tensor_scan (and tensor_scalar_cumulative, costed the same)
K_TS_REDUCE = "tensor_scalar_reduce"
K_BN_STATS = "bn_stats"
K_BN_AGGR = "bn_aggr"
K_RECIPROCAL = "reciprocal"  # VectorE nisa.reciprocal (8N)
K_COPY_PRED = "copy_predicated"
K_DYN_COPY = "dynamic_copy"
K_GPSIMD = "gpsimd"  # 150 + N: iota, affine_select, gathers, partition reduce
K_MAX8 = "max8"
K_SOFTMAX = "softmax"  # composite: max-reduce, exp, sum-reduce, scale
K_RMSNORM = "rms_norm"  # composite: square+sum (activation with reduce), scale, multiply by weight
K_ACCUMULATE = "accumulate"  # unfused acc += x: a VectorE tensor_tensor add with the destination as input
K_FREE = "free"
K_UNKNOWN = "unknown"

ACTIVATION_FUNCS = frozenset({
    "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "gelu_dx", "gelu_apprx_tanh",
    "gelu_apprx_sigmoid", "gelu_apprx_sigmoid_dx", "silu", "silu_dx", "erf", "erf_dx", "softplus", "mish",
    "sin", "cos", "tan", "arctan", "square", "reciprocal"})  # nl.reciprocal = ScalarE activation (§3.2)
VECTOR_UNARY = frozenset({"abs", "negative", "sign", "trunc", "floor", "ceil", "logical_not", "invert", "copy",
                          "identity", "bypass", "broadcast_to", "rand", "static_cast"})
BINARY = frozenset({
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "fmod", "mod", "abs_max", "abs_min",
    "equal", "not_equal", "greater", "greater_equal", "less", "less_equal", "logical_and", "logical_or",
    "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "where",
    "loop_reduce", "power", "pow", "true_divide", "floor_divide", "and_", "or_", "xor", "lshift", "rshift"})
GPSIMD_BINARY = frozenset({"power", "pow"})  # [NL] §3.2 tensor_tensor: nl.power runs on GpSimd
REDUCTIONS = frozenset({"sum", "max", "min", "mean", "prod", "all", "var"})
FILLS = frozenset({"zeros", "ones", "full", "zeros_like", "ones_like", "full_like"})
NO_COST_NL = frozenset({"ndarray", "empty_like", "ndarray_like", "device_print", "shared_identity_matrix"})

_NISA: dict[str, tuple[int, str]] = {
    "nc_matmul": (TENSOR, K_MATMUL), "nc_matmul_mx": (TENSOR, K_MATMUL_MX),
    "nc_transpose": (TENSOR, K_PE_TRANSPOSE),
    "activation": (SCALAR, K_ACTIVATION), "activation_reduce": (SCALAR, K_ACTIVATION),
    "exponential": (VECTOR, K_EXPONENTIAL),
    "tensor_tensor": (VECTOR, K_TENSOR_TENSOR), "tensor_scalar": (VECTOR, K_TENSOR_SCALAR),
    "tensor_copy": (VECTOR, K_COPY), "memset": (VECTOR, K_MEMSET),
    "scalar_tensor_tensor": (VECTOR, K_STT), "tensor_reduce": (VECTOR, K_REDUCE),
    "tensor_tensor_scan": (VECTOR, K_SCAN), "tensor_scalar_cumulative": (VECTOR, K_SCAN),
    "tensor_scalar_reduce": (VECTOR, K_TS_REDUCE),
    "tensor_copy_predicated": (VECTOR, K_COPY_PRED),
    "tensor_copy_dynamic_src": (VECTOR, K_DYN_COPY), "tensor_copy_dynamic_dst": (VECTOR, K_DYN_COPY),
    "reciprocal": (VECTOR, K_RECIPROCAL),
    "bn_stats": (VECTOR, K_BN_STATS), "bn_aggr": (VECTOR, K_BN_AGGR),
    "range_select": (VECTOR, K_TENSOR_SCALAR), "select_reduce": (VECTOR, K_TENSOR_TENSOR),
    "dropout": (VECTOR, K_TENSOR_SCALAR), "nc_stream_shuffle": (VECTOR, K_TENSOR_SCALAR),
    "rng": (VECTOR, K_TENSOR_SCALAR), "rand2": (VECTOR, K_TENSOR_SCALAR), "quantize_mx": (VECTOR, K_TENSOR_SCALAR),
    "max8": (VECTOR, K_MAX8), "nc_find_index8": (VECTOR, K_MAX8), "nc_match_replace8": (VECTOR, K_MAX8),
    "iota": (GPSIMD, K_GPSIMD), "affine_select": (GPSIMD, K_GPSIMD), "local_gather": (GPSIMD, K_GPSIMD),
    "nc_n_gather": (GPSIMD, K_GPSIMD), "tensor_partition_reduce": (GPSIMD, K_GPSIMD),
    "sequence_bounds": (GPSIMD, K_GPSIMD), "topk": (GPSIMD, K_GPSIMD), "nonzero_with_count": (GPSIMD, K_GPSIMD),
    "set_rng_seed": (GPSIMD, K_GPSIMD), "rand_set_state": (GPSIMD, K_GPSIMD), "rand_get_state": (GPSIMD, K_GPSIMD),
    "dma_copy": (DMA, K_DMA), "dma_transpose": (DMA, K_DMA_TRANSPOSE),
}
_ENGINE_ATTR = {"vector": VECTOR, "scalar": SCALAR, "gpsimd": GPSIMD, "tensor": TENSOR}
# kinds whose engine= argument may move them to another compute engine ([NL] §3.2)
_MOVABLE = frozenset({K_TENSOR_TENSOR, K_TENSOR_SCALAR, K_COPY, K_MEMSET, K_ACTIVATION})
_INT_DTYPES = ("int32", "uint32")


def _touches_hbm(instr: Instr) -> bool:
    for a in instr.reads:
        if a.buffer == "hbm":
            return True
    for a in instr.writes:
        if a.buffer == "hbm":
            return True
    return False


def _tile_reads(instr: Instr) -> int:
    """Tile operands read; a [P,1] column broadcast along a wider output is a scalar operand (tensor_scalar)."""
    n_out = max((w.free_elements for w in instr.writes), default=1)
    return sum(1 for a in instr.reads if a.free_elements > 1 or a.free_elements == n_out)


def classify(instr: Instr, broadcast_fmax: int = 512) -> tuple[int, str]:
    """``(lane, kind)`` of one traced instruction (lane DMA for every DMA; FREE for no cost).

    ``broadcast_fmax``: the widest row a partition broadcast does on TensorE (the target's
    ``gemm_moving_fmax``)."""
    api = instr.api
    if not instr.reads and not instr.writes:
        return FREE, K_FREE
    prefix, _, name = api.partition(".")
    attrs = instr.attrs
    if prefix == "nisa":
        lane, kind = _NISA.get(name, (VECTOR, K_UNKNOWN))
        if lane == DMA:
            return lane, kind
        if _touches_hbm(instr):
            return DMA, K_DMA  # compute engines never read HBM: the tracer saw a transfer
        eng = _ENGINE_ATTR.get(str(attrs.get("engine", "")))
        if kind == K_PE_TRANSPOSE and eng == VECTOR:
            return VECTOR, K_VEC_TRANSPOSE
        if kind in _MOVABLE and eng is not None and eng != TENSOR:
            return eng, kind
        if kind == K_TENSOR_TENSOR and eng is None:
            ops = attrs.get("ops", ())
            if any(o in GPSIMD_BINARY for o in ops):
                return GPSIMD, kind
            if instr.reads and all(a.dtype in _INT_DTYPES for a in instr.reads):
                return GPSIMD, kind  # [NL] §3.2: int32/uint32-only operands default to GpSimd (new API)
        return lane, kind
    if prefix == "nl":
        if name in ("load", "store", "shared_constant"):
            return DMA, K_DMA
        if name == "load_transpose2d":
            return DMA, K_DMA_TRANSPOSE
        if _touches_hbm(instr):
            return DMA, K_DMA  # nl.copy / broadcast from or to HBM
        if name in NO_COST_NL:
            return FREE, K_FREE
        if name == "matmul":
            return TENSOR, K_NL_MATMUL
        if name == "transpose":
            return TENSOR, K_PE_TRANSPOSE
        if name in FILLS:
            return VECTOR, K_MEMSET
        if name in ACTIVATION_FUNCS:
            return SCALAR, K_ACTIVATION
        if name == "softmax":
            return VECTOR, K_SOFTMAX
        if name == "rms_norm":
            return VECTOR, K_RMSNORM
        if name in REDUCTIONS:
            return VECTOR, K_REDUCE
        if name == "broadcast_to" and is_partition_broadcast(instr) \
                and instr.reads[0].free_elements <= broadcast_fmax:
            return TENSOR, K_PE_BROADCAST
        if name in ("copy", "identity", "bypass", "broadcast_to"):
            return VECTOR, K_COPY
        if name in VECTOR_UNARY:
            return VECTOR, K_TENSOR_SCALAR
        if name in BINARY:
            lane = GPSIMD if name in GPSIMD_BINARY else VECTOR
            return lane, (K_TENSOR_TENSOR if _tile_reads(instr) >= 2 else K_TENSOR_SCALAR)
        return VECTOR, K_UNKNOWN
    if prefix == "op":
        if _touches_hbm(instr):
            return DMA, K_DMA
        lane = GPSIMD if name in GPSIMD_BINARY else VECTOR
        return lane, (K_TENSOR_TENSOR if _tile_reads(instr) >= 2 else K_TENSOR_SCALAR)
    if api == "assign":
        return (DMA, K_DMA) if _touches_hbm(instr) else (VECTOR, K_COPY)
    if api == "accumulate":
        return (DMA, K_DMA) if _touches_hbm(instr) else (VECTOR, K_ACCUMULATE)
    if _touches_hbm(instr):
        return DMA, K_DMA
    return VECTOR, K_UNKNOWN


def is_partition_broadcast(instr: Instr) -> bool:
    """A one-partition on-chip tile broadcast across several partitions."""
    return (len(instr.reads) == 1 and instr.reads[0].partitions == 1 and instr.reads[0].buffer != "hbm"
            and bool(instr.writes) and instr.writes[0].partitions > 1)


def is_psum_zeroing(instr: Instr, kind: str) -> bool:
    """A fill of PSUM only (nl.zeros / memset): free if its first user is a matmul writing it."""
    if kind != K_MEMSET or not instr.writes or instr.reads:
        return False
    if not all(w.buffer == "psum" for w in instr.writes):
        return False
    name = instr.api.partition(".")[2]
    return name in ("zeros", "zeros_like") or (name == "memset" and instr.attrs.get("value", 0) in (0, 0.0))


MATMUL_KINDS = frozenset({K_MATMUL, K_MATMUL_MX, K_NL_MATMUL})

