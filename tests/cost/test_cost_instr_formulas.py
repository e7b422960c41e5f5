"""Instruction costs against the formulas of nki-language.md §5 ("Instruction cost formulas"), and the
engine each traced API is mapped to."""

from __future__ import annotations

import pytest
from nki_agent.toolchain.cost import engines as E
from nki_agent.toolchain.cost import instr_cost as C
from nki_agent.toolchain.cost.hardware import HARDWARE, TRN1, TRN2, TRN3
from nki_agent.toolchain.sim.trace import Instr
from trace_builders import TB


def cycles(ins: Instr, target: str = "trn1") -> float:
    lane, kind = E.classify(ins)
    return C.cost(ins, lane, kind, HARDWARE[target]).cycles


# --- the formulas themselves ------------------------------------------------------------------------------
@pytest.mark.parametrize("m,n,fp32,expected", [
    (128, 512, False, 512),  # max(min(64, 128), 512)
    (128, 1, False, 64),  # a matrix-vector matmul still takes min(64, N_stationary)
    (32, 16, False, 32),
    (128, 512, True, 2048),  # fp32 x4
])
def test_matmul_formula(m: int, n: int, fp32: bool, expected: float) -> None:
    assert C.matmul_cycles(m, n, fp32) == expected


def test_load_stationary_is_four_times_faster_than_multiply_moving() -> None:
    assert C.load_stationary_cycles(128) == 32
    assert C.load_stationary_cycles(128, fp32=True) == 128


@pytest.mark.parametrize("p,f,expected", [(128, 32, 128), (32, 128, 64), (16, 16, 16)])
def test_pe_transpose_formula(p: int, f: int, expected: float) -> None:
    assert C.pe_transpose_cycles(p, f) == expected  # max(P, min(64, F))


def test_activation_formula() -> None:
    assert C.activation_cycles(512) == 512
    assert C.activation_cycles(10) == 64  # MIN_II
    assert C.activation_cycles(512, reduce=True) == 512 + 64
    assert C.activation_cycles(512, sin_cos=True) == pytest.approx(512 * 4.8)


def test_vector_formulas() -> None:
    assert C.tensor_tensor_cycles(512) == 1024
    assert C.tensor_tensor_cycles(512, psum_operand=True) == 512
    assert C.tensor_tensor_cycles(512, bf16_fast=True) == 512
    assert C.tensor_tensor_cycles(16) == 64
    assert C.tensor_scalar_cycles(512) == 512 and C.tensor_scalar_cycles(3) == 64
    assert C.memset_cycles(512) == 512 and C.memset_cycles(512, zero_16bit=True) == 256
    assert C.scalar_tensor_tensor_cycles(512, fast=True) == 512 and C.scalar_tensor_tensor_cycles(512) == 1024
    assert C.tensor_reduce_cycles(512) == 512 and C.tensor_reduce_cycles(512, bf16_fast=True) == 256
    assert C.scan_cycles(512) == 1024 and C.tensor_scalar_reduce_cycles(512) == 576
    assert C.bn_stats_cycles(512) == 512 and C.bn_aggr_cycles(300) == 1300 and C.bn_aggr_cycles(6) == 64
    assert C.reciprocal_cycles(512) == 4096 and C.reciprocal_cycles(4) == 64
    assert C.copy_predicated_cycles(512, both_sbuf=True) == 1024 and C.copy_predicated_cycles(512, False) == 512
    assert C.dynamic_copy_cycles(100) == 600 and C.dynamic_copy_cycles(1000) == 1000


def test_gpsimd_formula() -> None:
    assert C.gpsimd_cycles(512) == 662  # 150 + N
    assert C.gpsimd_cycles(100) == 250


# --- instructions from traces -----------------------------------------------------------------------------
def test_nc_matmul_bf16_vs_fp32() -> None:
    tb = TB()
    for dt, expected in (("bfloat16", 512), ("float32", 2048)):
        a, b, acc = tb.sbuf(128, 128, dt), tb.sbuf(128, 512, dt), tb.psum(128, 512)
        ins = tb.matmul(acc.all(), a.all(), b.all())
        lane, kind = E.classify(ins)
        c = C.cost(ins, lane, kind, TRN1)
        assert (lane, kind) == (E.TENSOR, E.K_MATMUL)
        assert c.cycles == expected
        assert c.flops == 2 * 128 * 128 * 512
        assert c.pe_kind == ("fp32" if dt == "float32" else "bf16")
        assert c.stationary == (a.storage, a.all().lo, a.all().hi)


def test_nl_matmul_without_transpose_x_adds_the_pe_transpose() -> None:
    tb = TB()
    x, y, out = tb.sbuf(128, 128), tb.sbuf(128, 512), tb.psum(128, 512)
    plain = tb.instr("nl.matmul", [x.all(), y.all()], [out.all()])
    transposed = tb.instr("nl.matmul", [x.all(), y.all()], [out.all()], transpose_x=True)
    assert cycles(transposed) == 512
    assert cycles(plain) == 512 + 128  # + max(P, min(64, F)) for x
    lane, kind = E.classify(plain)
    assert C.cost(plain, lane, kind, TRN1).flops == 2 * 128 * 128 * 512


def test_double_row_matmul_halves_the_moving_cycles() -> None:
    tb = TB("trn2")
    a = tb.buf("sbuf", 128, 2 * 128, "float8_e4m3")
    b = tb.buf("sbuf", 128, 2 * 512, "float8_e4m3")
    ins = tb.matmul(tb.psum(128, 512).all(), a.all(), b.all(), perf_mode="double_row")
    lane, kind = E.classify(ins)
    c = C.cost(ins, lane, kind, TRN2)
    assert c.cycles == 512 and c.flops == 2 * 256 * 128 * 512 and c.pe_kind == "double_row"


def test_activation_instructions() -> None:
    tb = TB()
    x, y = tb.sbuf(128, 512, "float32"), tb.sbuf(128, 512, "float32")
    assert cycles(tb.op("nisa.activation", y.all(), x.all(), ops=("exp",))) == 512
    assert cycles(tb.op("nl.exp", y.all(), x.all())) == 512
    assert cycles(tb.op("nl.sin", y.all(), x.all())) == pytest.approx(512 * 4.8)
    red = tb.sbuf(128, 1, "float32")
    assert cycles(tb.instr("nisa.activation", [x.all()], [y.all(), red.all()], ops=("exp", "add"))) == 512 + 64
    assert cycles(tb.op("nisa.activation_reduce", y.all(), x.all(), ops=("exp",))) == 512 + 64
    assert E.classify(tb.op("nl.tanh", y.all(), x.all()))[0] == E.SCALAR


def test_tensor_tensor_with_and_without_psum_operand() -> None:
    tb = TB()
    a, b, out = tb.sbuf(128, 512, "float32"), tb.sbuf(128, 512, "float32"), tb.sbuf(128, 512, "float32")
    p = tb.psum(128, 512)
    assert cycles(tb.op("nisa.tensor_tensor", out.all(), a.all(), b.all(), ops=("add",))) == 1024
    assert cycles(tb.op("nisa.tensor_tensor", out.all(), p.all(), b.all(), ops=("add",))) == 512
    # all-bf16 unit-stride add in SBUF: N
    x, y, z = tb.sbuf(128, 512), tb.sbuf(128, 512), tb.sbuf(128, 512)
    assert cycles(tb.op("nisa.tensor_tensor", z.all(), x.all(), y.all(), ops=("add",))) == 512
    assert cycles(tb.op("nisa.tensor_tensor", z.all(), x.all(), y.all(), ops=("divide",))) == 1024
    assert cycles(tb.op("op.multiply", out.all(), a.all(), b.all())) == 1024  # tile operator: tensor_tensor


def test_tensor_scalar_reduce_stats_reciprocal() -> None:
    tb = TB()
    x, y, col = tb.sbuf(128, 512, "float32"), tb.sbuf(128, 512, "float32"), tb.sbuf(128, 1, "float32")
    assert cycles(tb.op("nisa.tensor_scalar", y.all(), x.all(), ops=("multiply", "add"))) == 512
    assert cycles(tb.op("op.multiply", y.all(), x.all(), col.all())) == 512  # a [P,1] column is a scalar operand
    assert cycles(tb.op("nisa.tensor_reduce", col.all(), x.all(), ops=("add",))) == 512
    xb, cb = tb.sbuf(128, 512), tb.sbuf(128, 1)
    assert cycles(tb.op("nisa.tensor_reduce", cb.all(), xb.all(), ops=("add",))) == 256  # bf16 -> bf16 add
    assert cycles(tb.op("nl.sum", cb.all(), xb.all())) == 256
    stats, aggr = tb.sbuf(128, 6, "float32"), tb.sbuf(128, 2, "float32")
    assert cycles(tb.op("nisa.bn_stats", stats.all(), x.all())) == 512
    big = tb.sbuf(128, 300, "float32")
    assert cycles(tb.op("nisa.bn_aggr", aggr.all(), big.all())) == 1300
    assert cycles(tb.op("nisa.reciprocal", y.all(), x.all())) == 4096
    assert E.classify(tb.op("nl.reciprocal", y.all(), x.all()))[0] == E.SCALAR  # the fast ScalarE version


def test_gpsimd_instructions() -> None:
    tb = TB()
    out = tb.sbuf(128, 512, "int32")
    iota = tb.instr("nisa.iota", [], [out.all()])
    assert E.classify(iota)[0] == E.GPSIMD and cycles(iota) == 662
    x, y = tb.sbuf(128, 100, "float32"), tb.sbuf(128, 100, "float32")
    sel = tb.op("nisa.affine_select", y.all(), x.all())
    assert E.classify(sel)[0] == E.GPSIMD and cycles(sel) == 250
    ms = tb.instr("nisa.memset", [], [y.all()], engine="gpsimd")
    assert E.classify(ms)[0] == E.GPSIMD


def test_transposes() -> None:
    tb = TB()
    x, p = tb.sbuf(128, 32), tb.psum(32, 128, "bfloat16")
    pe = tb.op("nisa.nc_transpose", p.all(), x.all())
    assert E.classify(pe) == (E.TENSOR, E.K_PE_TRANSPOSE) and cycles(pe) == 128
    v, w = tb.sbuf(32, 32), tb.sbuf(32, 32)
    vt = tb.op("nisa.nc_transpose", w.all(), v.all(), engine="vector")
    assert E.classify(vt) == (E.VECTOR, E.K_VEC_TRANSPOSE) and cycles(vt) == 64
    assert E.classify(tb.op("nl.transpose", p.all(), x.all()))[0] == E.TENSOR


def test_v3_vector_perf_mode() -> None:
    tb = TB("trn2")
    x, y = tb.sbuf(128, 512), tb.sbuf(128, 512)
    assert cycles(tb.op("nisa.tensor_copy", y.all(), x.all()), "trn2") == 128  # all three hold: 4x
    assert cycles(tb.op("nisa.tensor_copy", y.all(), x.all()), "trn1") == 512
    xf, yf = tb.sbuf(128, 512, "float32"), tb.sbuf(128, 512, "float32")
    assert cycles(tb.op("nisa.tensor_scalar", yf.all(), xf.all()), "trn2") == 256  # two of three: 2x
    a, b, c = tb.sbuf(128, 512, "float32"), tb.sbuf(128, 512), tb.sbuf(128, 512)
    assert cycles(tb.op("nisa.tensor_tensor", c.all(), b.all(), b.all(), ops=("divide",)), "trn2") == 512
    assert cycles(tb.op("nisa.tensor_tensor", a.all(), b.all(), b.all(), ops=("divide",)), "trn2") == 512
    assert cycles(tb.op("nisa.tensor_copy", yf.all(), xf.all(), engine="scalar"), "trn3") == 512
    assert cycles(tb.op("nisa.tensor_copy", y.all(), x.all(), engine="scalar"), "trn3") == 256  # v4 ScalarE 2x


def test_memset_and_psum_zeroing() -> None:
    tb = TB()
    s16, s32 = tb.sbuf(128, 512), tb.sbuf(128, 512, "float32")
    assert cycles(tb.instr("nl.zeros", [], [s16.all()])) == 256  # zero in bf16: N/2
    assert cycles(tb.instr("nl.zeros", [], [s32.all()])) == 512
    p = tb.psum(128, 512)
    z = tb.instr("nl.zeros", [], [p.all()])
    assert E.is_psum_zeroing(z, E.classify(z)[1])
    assert not E.is_psum_zeroing(tb.instr("nl.zeros", [], [s32.all()]), E.K_MEMSET)


@pytest.mark.parametrize("api,bufs,attrs,lane", [
    ("nl.load", ("hbm", "sbuf"), {}, E.DMA),
    ("nl.store", ("sbuf", "hbm"), {}, E.DMA),
    ("nisa.dma_copy", ("sbuf", "sbuf"), {}, E.DMA),
    ("assign", ("hbm", "sbuf"), {}, E.DMA),
    ("assign", ("sbuf", "sbuf"), {}, E.VECTOR),
    ("accumulate", ("sbuf", "psum"), {}, E.VECTOR),
    ("nl.copy", ("psum", "sbuf"), {}, E.VECTOR),
    ("nl.copy", ("hbm", "sbuf"), {}, E.DMA),
    ("nisa.tensor_copy", ("psum", "sbuf"), {"engine": "scalar"}, E.SCALAR),
    ("nisa.tensor_scalar", ("sbuf", "sbuf"), {"engine": "gpsimd"}, E.GPSIMD),
    ("nisa.activation", ("psum", "sbuf"), {"ops": ("copy",)}, E.SCALAR),
    ("nl.gelu", ("sbuf", "sbuf"), {}, E.SCALAR),
    ("nl.abs", ("sbuf", "sbuf"), {}, E.VECTOR),
    ("nl.max", ("sbuf", "sbuf"), {}, E.VECTOR),
    ("nisa.bn_stats", ("sbuf", "sbuf"), {}, E.VECTOR),
    ("nisa.tensor_tensor", ("sbuf", "sbuf"), {"ops": ("power",)}, E.GPSIMD),
    ("nisa.something_new", ("sbuf", "sbuf"), {}, E.VECTOR),
])
def test_engine_mapping(api: str, bufs: tuple[str, str], attrs: dict[str, object], lane: int) -> None:
    tb = TB()
    src, dst = tb.buf(bufs[0], 128, 64, "float32"), tb.buf(bufs[1], 128, 64, "float32")
    assert E.classify(tb.op(api, dst.all(), src.all(), **attrs))[0] == lane


def test_unknown_and_empty_instructions() -> None:
    tb = TB()
    x, y = tb.sbuf(128, 512, "float32"), tb.sbuf(128, 512, "float32")
    unk = tb.op("nisa.something_new", y.all(), x.all())
    assert E.classify(unk) == (E.VECTOR, E.K_UNKNOWN) and cycles(unk) == 1024  # conservative 2N
    assert E.classify(tb.instr("nl.ndarray", [], []))[0] == E.FREE


def test_every_generation_has_hardware() -> None:
    assert [h.generation for h in (TRN1, TRN2, TRN3)] == [2, 3, 4]
    assert TRN1.dma_aggregate_bytes_per_ns == 272 and TRN2.dma_aggregate_bytes_per_ns == 368
    assert TRN3.dma_aggregate_bytes_per_ns == 528
    assert TRN1.tensor_peak_flops_per_ns() == pytest.approx(91750, rel=1e-3)  # 91.75 TFLOPS bf16
    assert TRN1.tensor_peak_flops_per_ns("fp32") == pytest.approx(91750 / 4, rel=1e-3)


def test_partition_broadcast_runs_on_tensor_engine_and_feeds_a_psum_operand() -> None:
    """fused-mamba tutorial: a partition-dimension broadcast is a separate TensorE instruction (a matmul
    with a ones stationary); its consumer reads PSUM, so tensor_tensor costs N, not 2N."""
    from nki_agent.toolchain.cost.schedule import prepare

    tb = TB()
    row, wide = tb.sbuf(1, 512, "float32"), tb.sbuf(128, 512, "float32")
    x, y = tb.sbuf(128, 512, "float32"), tb.sbuf(128, 512, "float32")
    bc = tb.instr("nl.broadcast_to", [row.all()], [wide.all()])
    assert E.classify(bc) == (E.TENSOR, E.K_PE_BROADCAST)
    assert cycles(bc) == 4 * 512  # N_moving = 512 fp32 columns, x4 for fp32
    tt = tb.instr("nisa.tensor_tensor", [x.all(), wide.all()], [y.all()], ops=("multiply",))
    plain = tb.instr("nisa.tensor_tensor", [x.all(), y.all()], [x.all()], ops=("multiply",))
    p = prepare(tb.trace, TRN1)
    assert p.cycles[1] == 512 and p.cycles[2] == 1024
    col = tb.sbuf(128, 1, "float32")  # a free-dim broadcast ([P,1] -> [P,F]) stays a VectorE copy
    assert E.classify(tb.instr("nl.broadcast_to", [col.all()], [wide.all()]))[0] == E.VECTOR


@pytest.mark.parametrize("target,width,lane", [
    ("trn1", 512, "tensor"), ("trn1", 1024, "vector"), ("trn2", 1024, "vector"), ("trn3", 1024, "tensor"),
    ("trn3", 8192, "vector")])
def test_partition_broadcast_on_tensor_engine_only_when_one_matmul_can_produce_it(target: str, width: int,
                                                                                   lane: str) -> None:
    """A row wider than the target's matmul moving-operand limit (one PSUM bank of fp32 on trn1/trn2,
    4096 on trn3) is not one TensorE instruction: it is copied across partitions on VectorE, and its
    consumers read SBUF (2N), not PSUM."""
    from nki_agent.toolchain.cost.schedule import prepare

    tb = TB()
    row, wide = tb.sbuf(1, width, "float32"), tb.sbuf(128, width, "float32")
    x, y = tb.sbuf(128, width, "float32"), tb.sbuf(128, width, "float32")
    tb.instr("nl.broadcast_to", [row.all()], [wide.all()])
    tb.instr("nisa.tensor_tensor", [x.all(), wide.all()], [y.all()], ops=("multiply",))
    p = prepare(tb.trace, HARDWARE[target])
    expect = {"tensor": (E.TENSOR, E.K_PE_BROADCAST), "vector": (E.VECTOR, E.K_COPY)}[lane]
    assert (p.lanes[0], p.kinds[0]) == expect
    assert p.cycles[1] == (width if lane == "tensor" else 2 * width)
