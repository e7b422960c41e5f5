"""The NKI API surface: one row per ``nl.*`` / ``nisa.*`` name of both API generations.

Each row says what the name is (function, dtype, buffer, constant, enum, type), whether a call returns a
tile in each generation and how its shape follows from its arguments (``result``), the buffer the result
lives in when that is fixed, the generations that have it, and its hover text. Signatures come from the
simulator (``toolchain/sim/language.py`` / ``isa_api.py``) through the generated
``nki_api_signatures.py`` (``python -m nki_agent.toolchain.facts.nki_api`` rewrites it); the engine a call runs
on is the cost model's (``toolchain/cost/engines.py``), asked lazily. A test builds both simulator
namespaces and fails when one has a name this table lacks, or when the signatures file is stale.

Readers: the static interpreter (which calls return tiles, and their shapes), ``diagnostics/api_reference``
(hover blurbs), ``diagnostics/isa_signatures`` (parameter lists of the source rewrites), the server's hover.
Importing this module imports nothing of the simulator (the static checker stays NumPy-free).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from functools import lru_cache

from nki_agent.toolchain.source_facts import CLASSIC, NEW

BOTH = (CLASSIC, NEW)
DOCS = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated"

# How a call's result follows from its arguments (the static interpreter implements each):
#   same       a tile shaped like its (broadcast) tile operands     reduce   the operand minus ``axis``
#   transpose  the operand's two axes swapped                        matmul   (M, N) of x[M,K] @ y[K,N]
#   alloc      ``shape`` argument                                    like     the first argument's shape
#   load       the source view's shape (in SBUF)                     broadcast  the ``shape`` argument
#   memset     classic ``nisa.memset(shape, ...)``                   iota     ``nisa.iota(expr, dtype)``
#   rows       (P, ``free``) of the operand's P partitions (bn_stats: 6, max8: 8)   identity  (n, n)
#   tile       a tile whose shape the arguments do not give         none     no value (stores, dst forms)
#   index      an index expression (arange/mgrid/ds)                 int      a Python int (program_id, ...)
#   value      another compile-time value (dtype, buffer, enum, constant, loop iterator, context manager)
TILE_RESULTS = frozenset({"same", "reduce", "transpose", "matmul", "alloc", "like", "load", "broadcast", "memset",
                          "iota", "rows", "identity", "tile"})


@dataclass(frozen=True)
class ApiRow:
    ns: str  # nl | nisa
    name: str
    kind: str  # function | dtype | buffer | constant | enum | type
    result: str  # classic result (see above)
    blurb: str  # hover text ({pmax} {sbuf} {psum} {stat} {mov} {target} are the target's limits)
    generations: tuple[str, ...] = BOTH
    new_result: str | None = None  # the new API's result when it differs (nisa dst form: "none")
    buffer: str | None = None  # the result's buffer when the API fixes it
    modelled: bool = True  # False: the simulator raises sim_unsupported_api
    free: int | None = None  # "rows" results: the free size of each partition's row
    like: str | None = None  # "same" results shaped like this one operand (not a broadcast of all of them)

    def result_in(self, generation: str) -> str:
        return self.new_result if generation == NEW and self.new_result is not None else self.result

    def returns_tile(self, generation: str) -> bool:
        return self.result_in(generation) in TILE_RESULTS

    @property
    def qualname(self) -> str:
        return f"{self.ns}.{self.name}"

    @property
    def url(self) -> str:
        return f"{DOCS}/nki.{'language' if self.ns == 'nl' else 'isa'}.{self.name}.html"

    def signature(self, generation: str) -> str:
        """``nl.load(src, mask=None, dtype=None) -> tile``: the simulator's parameters for ``generation``."""
        from nki_agent.toolchain.facts.nki_api_signatures import SIGNATURES

        params = SIGNATURES.get(f"{generation}:{self.qualname}")
        if params is None:
            return self.qualname if self.kind != "function" else f"{self.qualname}(...)"
        args = ", ".join(p if d is None else f"{p}={d}" for p, d in params)
        res = self.result_in(generation)
        tail = " -> tile" if res in TILE_RESULTS else (" -> None" if res == "none" else "")
        if res == "none" and params and params[0][0] == "dst":
            tail = "  (writes dst)"
        return f"{self.qualname}({args}){tail}"

    def params(self, generation: str) -> tuple[str, ...]:
        from nki_agent.toolchain.facts.nki_api_signatures import SIGNATURES

        return tuple(p for p, _ in SIGNATURES.get(f"{generation}:{self.qualname}", ()) if not p.startswith("*"))

    def engine(self) -> str:
        """The engine the cost model runs this call on, for on-chip operands ("" for non-instructions)."""
        return engine_of(self.ns, self.name) if self.kind == "function" and self.result != "value" else ""


ROWS: dict[tuple[str, str], ApiRow] = {}


def _add(ns: str, names: str, kind: str, result: str, blurb: str, **kw: object) -> None:
    for name in names.split():
        ROWS[(ns, name)] = ApiRow(ns, name, kind, result, blurb.replace("{name}", name), **kw)  # type: ignore[arg-type]


# -- nl: values -------------------------------------------------------------------------------------------
_add("nl", "bfloat16 bool_ float16 float32 float8_e4m3 float8_e4m3fn float8_e5m2 float8_e8m0fnu int16 int32 int8 "
     "tfloat32 uint16 uint32 uint8", "dtype", "value", "NKI dtype `{name}` (pass as `dtype=`).")
_add("nl", "fp32 bfp16 fp16", "constant", "value", "`nl.{name}.min` / `nl.{name}.max`: the extreme finite values of "
     "the type (classic constants).")
_add("nl", "sbuf psum", "buffer", "value", "On-chip buffer `{name}` (`buffer=nl.{name}`): {pmax} partitions; SBUF "
     "{sbuf} B and PSUM {psum} B per partition on {target}.")
_add("nl", "hbm private_hbm shared_hbm", "buffer", "value", "Device memory buffer `{name}` (`buffer=nl.{name}`): "
     "kernel inputs/outputs; moved on chip with DMA (`nl.load` / `nisa.dma_copy`).")
_add("nl", "tile_size", "constant", "value", "Hardware tile limits: `pmax` = {pmax} partitions, `psum_fmax` = 512 fp32 "
     "per PSUM bank, `gemm_stationary_fmax` = {stat}, `gemm_moving_fmax` = 512 (values on {target}).")
_add("nl", "tensor", "type", "value", "The NKI tensor type (`nt.tensor[shape, dtype]` annotates kernel parameters).")
# -- nl: loops, ids, index helpers -----------------------------------------------------------------------
_add("nl", "affine_range", "function", "value", "Loop whose iterations are independent (the compiler may "
     "reorder/pipeline them); `+=` accumulation into PSUM is allowed.")
_add("nl", "sequential_range", "function", "value", "Loop with a carried dependency: iterations run in order.")
_add("nl", "static_range", "function", "value", "Loop unrolled at trace time.")
_add("nl", "dynamic_range", "function", "value", "Loop whose trip count is only known on device.", modelled=False)
_add("nl", "program_id program_ndim num_programs", "function", "int", "SPMD grid: `{name}` of the launch grid "
     "(a Python int at trace time).")
_add("nl", "nc spmd_dim", "function", "value", "SPMD grid dimension spread over NeuronCores (`kernel[nl.nc(2)]`).")
_add("nl", "arange", "function", "index", "Index array `0..n-1` for advanced indexing (`[:, None]` makes the "
     "partition axis); classic API only.", generations=(CLASSIC,))
_add("nl", "mgrid", "function", "index", "`i_p, i_f = nl.mgrid[0:P, 0:F]`: index arrays of a tile; classic API only.",
     generations=(CLASSIC,))
_add("nl", "ds", "function", "index", "`nl.ds(start, size)`: a dynamic slice `start:start+size`.")
_add("nl", "par_dim", "function", "value", "`nl.par_dim(n)` marks the partition axis of a shape, "
     "e.g. `(4, nl.par_dim(128), 512)` is 4 tiles of 128 partitions; n <= {pmax}.")
_add("nl", "static_cast", "function", "value", "Casts a host value to a dtype at trace time.")
_add("nl", "device_print", "function", "none", "Prints a tile's values when simulated.")
_add("nl", "finfo", "function", "value", "Floating-point limits of a dtype (`min`, `max`, `eps`, `tiny`).")
_add("nl", "no_reorder", "function", "value", "Context manager: the instructions inside keep their order.")
# -- nl: allocation and memory ------------------------------------------------------------------------------
_add("nl", "ndarray zeros ones", "function", "alloc", "Allocates a tensor (`nl.{name}(shape, dtype, buffer=nl.sbuf)`); "
     "on chip: shape[0] (or the `par_dim` axis) <= {pmax} partitions; SBUF {sbuf} B and PSUM {psum} B per partition on "
     "{target}.")
_add("nl", "full", "function", "alloc", "Allocates a tensor filled with `fill_value` (`nl.full(shape, fill_value, "
     "dtype, buffer=...)`).")
_add("nl", "rand", "function", "alloc", "A tile of uniform [0, 1) values.")
_add("nl", "empty_like zeros_like ones_like full_like ndarray_like", "function", "like",
     "Allocates a tensor with the shape (and dtype unless given) of its first argument.")
_add("nl", "shared_constant", "function", "tile", "A constant tensor shared by every instance (in HBM).",
     buffer="hbm")
_add("nl", "shared_identity_matrix", "function", "identity", "An n x n identity matrix constant.")
_add("nl", "load", "function", "load", "HBM -> SBUF copy of a tile. Partition dim (first) <= {pmax}; the result lives "
     "in SBUF.", buffer="sbuf")
_add("nl", "load_transpose2d", "function", "transpose", "HBM -> SBUF copy of a 2-D tile, transposed (partition <-> "
     "free); the result has <= {pmax} partitions.", buffer="sbuf")
_add("nl", "store", "function", "none", "SBUF/PSUM tile -> HBM tensor. `dst` must be in HBM; shapes must match.")
_add("nl", "copy", "function", "same", "Copies a tile (e.g. PSUM -> SBUF).", buffer="sbuf")
_add("nl", "broadcast_to", "function", "broadcast", "Broadcasts a tile to `shape` (a one-partition tile across "
     "partitions runs on TensorE).", buffer="sbuf")
# -- nl: compute -------------------------------------------------------------------------------------------
_UNARY = ("exp log sqrt rsqrt reciprocal square abs negative sign trunc floor ceil sin cos tan tanh arctan sigmoid relu "
          "gelu gelu_dx gelu_apprx_tanh gelu_apprx_sigmoid gelu_apprx_sigmoid_dx silu silu_dx erf erf_dx softplus mish "
          "logical_not invert bypass identity")
_add("nl", _UNARY, "function", "same", "Element-wise `{name}(x)` of a tile (computed in fp32, cast to `dtype`); "
     "the result has x's shape, in SBUF.", buffer="sbuf")
_BINARY = ("add subtract multiply divide power maximum minimum fmod mod abs_max abs_min equal not_equal greater "
           "greater_equal less less_equal logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor "
           "left_shift right_shift")
_add("nl", _BINARY, "function", "same", "Element-wise `{name}(x, y)` of two tiles or a tile and a scalar (a (P, 1) "
     "tile broadcasts along the free axis); the result is in SBUF.", buffer="sbuf")
_add("nl", "where", "function", "same", "Element-wise `condition ? x : y`.", buffer="sbuf")
_add("nl", "sum max min mean prod var all", "function", "reduce", "Reduces `x` along the free `axis` with {name} "
     "(`keepdims=True` keeps it as size 1); never the partition axis.", buffer="sbuf")
_add("nl", "matmul", "function", "matmul", "x @ y (x[M,K] or x.T with transpose_x). Contraction K <= {pmax}, M <= "
     "{stat}, N <= {mov}; result in PSUM (fp32).", buffer="psum")
_add("nl", "transpose", "function", "transpose", "2-D transpose of a tile (partition <-> free), <= {pmax} on both axes.")
_add("nl", "softmax", "function", "same", "Softmax along `axis` (max, exp, sum, scale).", buffer="sbuf")
_add("nl", "rms_norm", "function", "same", "RMS normalisation of `x` along `axis`, scaled by `w`.", buffer="sbuf")
_add("nl", "loop_reduce", "function", "same", "`b = nl.loop_reduce(a, op, loop_indices)`: `b = op(b, a)` across the "
     "loop.", buffer="sbuf")
_add("nl", "all_reduce gather_flattened atomic_rmw random_seed dropout fori_loop while_loop select_reduce prelu "
     "average", "function", "tile", "`nl.{name}` (not modelled by the embedded simulator: a simulation stops with "
     "sim_unsupported_api).", modelled=False)
ROWS[("nl", "random_seed")] = ApiRow("nl", "random_seed", "function", "none", ROWS[("nl", "random_seed")].blurb,
                                     modelled=False)
ROWS[("nl", "fori_loop")] = ApiRow("nl", "fori_loop", "function", "value", ROWS[("nl", "fori_loop")].blurb,
                                   modelled=False)
ROWS[("nl", "while_loop")] = ApiRow("nl", "while_loop", "function", "value", ROWS[("nl", "while_loop")].blurb,
                                    modelled=False)
ROWS[("nl", "atomic_rmw")] = ApiRow("nl", "atomic_rmw", "function", "none", ROWS[("nl", "atomic_rmw")].blurb,
                                    modelled=False)

# -- nisa ------------------------------------------------------------------------------------------------
_add("nisa", "engine reduce_cmd oob_mode dge_mode nc_version matmul_perf_mode dma_engine", "enum", "value",
     "Enumeration `nisa.{name}` (an argument value).")
_add("nisa", "tensor_engine vector_engine scalar_engine gpsimd_engine unknown_engine", "enum", "value",
     "`engine=nisa.{name}`: the engine an instruction runs on.")
_add("nisa", "get_nc_version", "function", "value", "The NeuronCore version of the target (gen2 = trn1, gen3 = trn2, "
     "gen4 = trn3).")
_DST = " (new API: the destination tile `dst` comes first and the call returns nothing)"


def _isa(names: str, result: str, blurb: str, generations: tuple[str, ...] = BOTH, buffer: str | None = None,
         free: int | None = None) -> None:
    _add("nisa", names, "function", result, blurb + (_DST if NEW in generations else ""), generations=generations,
         new_result="none", buffer=buffer, free=free)


_isa("nc_matmul", "matmul", "stationary[K,M].T @ moving[K,N] -> [M,N] on TensorE, fp32 into PSUM. K <= {pmax}, M <= "
     "{stat}, N <= {mov}; operands in SBUF. Repeated writes to a PSUM tile accumulate.", buffer="psum")
_isa("nc_transpose", "transpose", "Transposes a 2-D tile: on TensorE (<= {pmax}x{pmax}, result in PSUM) or VectorE "
     "(<= 32x32).")
_isa("activation", "same", "ScalarE: op(data * scale + bias); `bias` is a (P, 1) vector, `scale` a scalar or (P, 1) "
     "vector; optional free-axis reduction into `reduce_res`.", buffer="sbuf")
_isa("activation_reduce", "same", "ScalarE activation with a free-axis reduction into `reduce_res`.",
     generations=(CLASSIC,), buffer="sbuf")
_isa("tensor_tensor", "same", "Element-wise op of two tiles with the same partitions (<= {pmax}).", buffer="sbuf")
_isa("tensor_scalar", "same", "(data op0 operand0) op1 operand1, operands scalars or (P, 1) vectors.", buffer="sbuf")
_isa("scalar_tensor_tensor", "same", "(data op0 operand0) op1 operand1 with operand1 a tile.", buffer="sbuf")
_isa("tensor_reduce", "reduce", "Reduces free axes with `op` (new API: trailing free axes only); never the partition "
     "axis.", buffer="sbuf")
_isa("tensor_copy", "same", "Copies a tile on a compute engine (e.g. PSUM -> SBUF, or a dtype conversion).",
     buffer="sbuf")
_isa("reciprocal", "same", "Element-wise 1/x on VectorE.", buffer="sbuf")
_isa("iota", "iota", "Writes an affine index pattern into a tile (GpSimd).", buffer="sbuf")
_isa("memset", "memset", "Fills a tile with a constant (classic: `nisa.memset(shape, value, dtype)`).", buffer="sbuf")
_isa("affine_select", "same", "Selects `on_true_tile` where an affine predicate of the indices holds, else "
     "`on_false_value` (GpSimd).", buffer="sbuf")
_isa("bn_stats", "rows", "Batch-norm statistics (mean, variance parts) of each partition's free elements; free size "
     "<= 512.", buffer="sbuf", free=6)
_isa("bn_aggr", "rows", "Aggregates `bn_stats` results into mean and variance per partition.", buffer="sbuf",
     free=2)
_isa("tensor_tensor_scan", "same", "Scan along the free axis: out[i] = (out[i-1] op0 data0[i]) op1 data1[i].",
     buffer="sbuf")
_isa("tensor_scalar_cumulative", "same", "Cumulative tensor_scalar along the free axis.", generations=(NEW,),
     buffer="sbuf")
_isa("select_reduce", "none", "Selects between two tiles by a predicate into `dst`, optionally reducing into "
     "`reduce_res` (writes dst in both generations).")
_isa("range_select", "same", "Keeps elements within [bound0, bound1], else `on_false_value`, optionally reducing.",
     buffer="sbuf")
_isa("tensor_copy_predicated", "none", "Copies `src` into `dst` where `predicate` holds (writes dst in both "
     "generations).")
_isa("nc_stream_shuffle", "none", "Shuffles partitions of `src` into `dst` by `shuffle_mask` (writes dst).")
_isa("local_gather", "tile", "Gathers elements of an SBUF buffer by per-partition indices (GpSimd).", buffer="sbuf")
_isa("nc_n_gather", "tile", "Gathers free elements by indices (GpSimd).", generations=(NEW,), buffer="sbuf")
_isa("dropout", "same", "Zeroes elements with probability `prob`.", buffer="sbuf")
_isa("dma_transpose", "transpose", "Transposes a tile with the DMA engines.", buffer="sbuf")
_isa("max8", "rows", "The 8 largest values of each partition.", buffer="sbuf", free=8)
_isa("nc_find_index8", "rows", "Indices of 8 values in each partition.", buffer="sbuf", free=8)
_isa("nc_match_replace8", "same", "Replaces 8 matched values of each partition with `imm`.", buffer="sbuf")
ROWS[("nisa", "nc_match_replace8")] = replace(ROWS[("nisa", "nc_match_replace8")], like="data")
_isa("tensor_partition_reduce", "tile", "Reduces across partitions with `op` (GpSimd).", buffer="sbuf")
_isa("tensor_scalar_reduce", "same", "tensor_scalar followed by a free-axis reduction into `reduce_res`.",
     buffer="sbuf")
_isa("exponential", "same", "exp(src - max_value) on VectorE (gen4), optionally reducing.", generations=(NEW,),
     buffer="sbuf")
ROWS[("nisa", "dma_copy")] = ApiRow("nisa", "dma_copy", "function", "none", "DMA between any two buffers (HBM <-> "
                                    "SBUF, SBUF <-> SBUF); element counts must match; writes dst.")
for _k in ("tensor_copy_predicated", "nc_stream_shuffle", "select_reduce"):
    ROWS[("nisa", _k)] = ApiRow("nisa", _k, "function", "none", ROWS[("nisa", _k)].blurb.replace(_DST, ""))


def row(ns: str, name: str) -> ApiRow | None:
    return ROWS.get((ns, name))


def lookup(ns: str, name: str) -> ApiRow | None:
    """The row of ``ns.name``, else of the same name in the other namespace (``nisa.reciprocal`` / ``nl``)."""
    return ROWS.get((ns, name)) or ROWS.get(("nisa" if ns == "nl" else "nl", name))


def tile_results(ns: str, generation: str) -> frozenset[str]:
    """Names of ``ns`` whose call returns a tile in ``generation`` (the static interpreter's list)."""
    return frozenset(r.name for r in ROWS.values() if r.ns == ns and generation in r.generations
                     and r.kind == "function" and r.returns_tile(generation))


def allocators() -> frozenset[str]:
    return frozenset(r.name for r in ROWS.values() if r.result in ("alloc", "like"))


# -- API of a qualified name -----------------------------------------------------------------------------
API_PREFIXES = (("neuronxcc.nki.language.", "nl"), ("nki.language.", "nl"), ("neuronxcc.nki.isa.", "nisa"),
                ("nki.isa.", "nisa"), ("neuronxcc.nki.typing.", "nt"), ("nki.typing.", "nt"),
                ("neuronxcc.nki.", "nki"), ("nki.", "nki"))


def api_of(qualified: str) -> tuple[str, str] | None:
    """``neuronxcc.nki.language.load`` -> ``("nl", "load")``; namespace 'nl', 'nisa', 'nki' or 'nt'."""
    for prefix, ns in API_PREFIXES:
        if qualified.startswith(prefix):
            return ns, qualified[len(prefix):]
    return None


# -- the cost model's engine -----------------------------------------------------------------------------
@lru_cache(maxsize=512)
def engine_of(ns: str, name: str) -> str:
    """The engine ``toolchain/cost/engines.py`` assigns to ``ns.name`` with SBUF operands (DMA for transfers)."""
    from nki_agent.toolchain.cost import engines
    from nki_agent.toolchain.sim.trace import Access, Instr

    tile = Access(0, "sbuf", (128, 512), "float32", 128 * 512 * 4, 128, 0, 512 * 4, 512 * 4)
    reads = [tile, tile] if name not in ("zeros", "ones", "full", "memset", "iota", "ndarray") else []
    if name in ("load", "load_transpose2d", "dma_copy", "dma_transpose", "shared_constant"):
        reads = [Access(1, "hbm", (128, 512), "float32", 128 * 512 * 4, 128, 0, 512 * 4, 512 * 4)]
    lane, _kind = engines.classify(Instr(0, f"{ns}.{name}", 1, (), 0, reads, [tile], {}))
    if lane == engines.FREE:
        return "none (folded by the compiler)"
    return "DMA" if lane >= engines.DMA else engines.LANE_NAMES[lane]


# -- the simulator's surface (tests and the signatures generator) ---------------------------------------
def simulator_surface() -> dict[tuple[str, str, str], object]:
    """``(generation, ns, name) -> object`` of every public name of the simulator's ``nl`` / ``nisa``."""
    from nki_agent.toolchain.sim import isa_api, language

    out: dict[tuple[str, str, str], object] = {}
    for gen in BOTH:
        for ns, mod in (("nl", language.build(gen)), ("nisa", isa_api.build(gen))):
            for k, v in vars(mod).items():
                if not k.startswith("_"):
                    out[(gen, ns, k)] = v
    return out


def _signature(obj: object) -> tuple[tuple[str, str | None], ...] | None:
    import inspect

    if not callable(obj) or isinstance(obj, type):
        return None
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    out: list[tuple[str, str | None]] = []
    for p in sig.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            continue
        if p.kind is p.VAR_POSITIONAL:
            out.append((f"*{p.name}", None))
            continue
        default = None if p.default is p.empty else (p.default.name if hasattr(p.default, "name") and
                                                      hasattr(p.default, "value") else repr(p.default))
        out.append((p.name, default))
    return tuple(out)


def generated_signatures() -> dict[str, tuple[tuple[str, str | None], ...]]:
    out = {}
    for (gen, ns, name), obj in sorted(simulator_surface().items()):
        r = ROWS.get((ns, name))
        if r is None or not r.modelled:
            continue
        sig = _signature(obj)
        if sig is not None:
            out[f"{gen}:{ns}.{name}"] = sig
    return out


def render_signatures() -> str:
    lines = ['"""Generated by ``python -m nki_agent.toolchain.facts.nki_api`` from the simulator\'s namespaces: the parameters',
             "(name, default or None) of every modelled ``nl`` / ``nisa`` function per API generation. Do not edit.\"\"\"",
             "", "SIGNATURES: dict[str, tuple[tuple[str, str | None], ...]] = {"]
    for key, params in generated_signatures().items():
        lines.append(f"    {key!r}: {params!r},")
    lines.append("}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover - the generator
    import os

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nki_api_signatures.py")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(render_signatures())
    sys.stdout.write(f"wrote {path}\n")
