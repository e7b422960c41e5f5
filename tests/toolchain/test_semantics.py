"""Documented NKI semantics, one per test, checked through the real simulator.

Every test runs small kernels of either API generation (classic ``neuronxcc.nki`` and new ``nki``)
in-process and compares with a NumPy expectation. The facts come from the semantics reference
(the NKI language notes; section numbers in the test docstrings).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from nki_agent.toolchain.facts.errors import NkiError
from nki_agent.toolchain.shim import installed
from nki_agent.toolchain.sim.kernel import DEFAULTS, LaunchDefaults

with installed():
    import neuronxcc.nki as nki  # noqa: PLR0402 (the spelling NKI kernels use)
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl
    import nki as nnki
    import nki.isa as nnisa
    import nki.language as nnl

BF16 = np.dtype(ml_dtypes.bfloat16)
RNG = np.random.default_rng(1234)
SEEN: dict[str, Any] = {}  # what kernels observed about their own tiles (shapes, dtypes, ids)


def rand(*shape: int, dtype: Any = np.float32, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(np.float32).astype(dtype)


@contextlib.contextmanager
def target(name: str) -> Iterator[None]:
    tok = DEFAULTS.set(LaunchDefaults(target=name))
    try:
        yield
    finally:
        DEFAULTS.reset(tok)


def f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


# =========================================================================== 1. nc_matmul (Top 10 #1)
@nki.jit
def c_matmul(st, mv):
    _, M = st.shape
    _, N = mv.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    res = nisa.nc_matmul(nl.load(st), nl.load(mv))
    SEEN["c_matmul"] = (tuple(res.shape), res.dtype, res.buffer)
    nl.store(out, value=nl.copy(res, dtype=nl.float32))
    return out


@nnki.jit
def n_matmul(st, mv):
    K, M = st.shape
    _, N = mv.shape
    out = nnl.ndarray((M, N), dtype=nnl.float32, buffer=nnl.shared_hbm)
    s = nnl.ndarray((K, M), dtype=st.dtype, buffer=nnl.sbuf)
    m = nnl.ndarray((K, N), dtype=mv.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=s, src=st)
    nnisa.dma_copy(dst=m, src=mv)
    acc = nnl.ndarray((M, N), dtype=nnl.float32, buffer=nnl.psum)
    nnisa.nc_matmul(acc, s, m)
    r = nnl.ndarray((M, N), dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.tensor_copy(dst=r, src=acc)
    nnisa.dma_copy(dst=out, src=r)
    return out


MATMUL_SHAPES = [(128, 128, 512), (64, 32, 100), (1, 8, 8), (128, 1, 1), (17, 128, 33)]


@pytest.mark.parametrize("kmn", MATMUL_SHAPES, ids=[f"K{k}_M{m}_N{n}" for k, m, n in MATMUL_SHAPES])
@pytest.mark.parametrize("kernel", [c_matmul, n_matmul], ids=["classic", "new"])
def test_nc_matmul_is_stationary_T_at_moving(kernel, kmn) -> None:
    """nc_matmul(stationary [K,M], moving [K,N]) = stationary.T @ moving, [M, N], contraction on partitions."""
    k, m, n = kmn
    st, mv = rand(k, m), rand(k, n)
    out = kernel(st, mv)
    assert out.shape == (m, n) and out.dtype == np.float32
    np.testing.assert_allclose(out, st.T.astype(np.float64) @ mv, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dt", [np.float32, BF16, np.float16], ids=["fp32", "bf16", "fp16"])
def test_classic_nc_matmul_result_is_fp32_psum(dt) -> None:
    """The TensorE result tile lives in PSUM and is fp32 whatever the (matching) input dtype."""
    st, mv = rand(64, 32, dtype=dt), rand(64, 48, dtype=dt)
    out = c_matmul(st, mv)
    shape, dtype, buffer = SEEN["c_matmul"]
    assert shape == (32, 48)
    assert np.dtype(dtype) == np.float32
    assert "psum" in str(getattr(buffer, "label", buffer)).lower()
    np.testing.assert_allclose(out, f64(st).T @ f64(mv), rtol=1e-5, atol=1e-5)  # fp32 accumulation of exact products


# ============================================================== 2. PSUM accumulation (Top 10 #2)
@nki.jit
def c_matmul_acc(a_t, b):
    K, M = a_t.shape
    _, N = b.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((M, N), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // 128):
        acc += nisa.nc_matmul(nl.load(a_t[k * 128:(k + 1) * 128, :]), nl.load(b[k * 128:(k + 1) * 128, :]))
    nl.store(out, value=nl.copy(acc, dtype=nl.float32))
    return out


@nki.jit
def c_matmul_acc_nl(a_t, b):
    K, M = a_t.shape
    _, N = b.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((M, N), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // 128):
        acc += nl.matmul(nl.load(a_t[k * 128:(k + 1) * 128, :]), nl.load(b[k * 128:(k + 1) * 128, :]),
                         transpose_x=True)
    nl.store(out, value=nl.copy(acc, dtype=nl.float32))
    return out


@pytest.mark.parametrize("ktiles", [1, 2, 4])
@pytest.mark.parametrize("kernel", [c_matmul_acc, c_matmul_acc_nl], ids=["nc_matmul", "nl.matmul"])
def test_classic_psum_accumulates_across_affine_range(kernel, ktiles) -> None:
    """Classic ``acc += matmul(...)`` in affine_range accumulates every K tile in fp32 PSUM."""
    a_t, b = rand(128 * ktiles, 64), rand(128 * ktiles, 96)
    np.testing.assert_allclose(kernel(a_t, b), f64(a_t).T @ f64(b), rtol=1e-4, atol=1e-4)


@nnki.jit
def n_accumulate_auto(a1, b1, a2, b2, a3, b3):
    """Two matmuls into one PSUM tile (accumulate=None), read it, then a third one."""
    _, M = a1.shape
    _, N = b1.shape
    out1 = nnl.ndarray((M, N), dtype=nnl.float32, buffer=nnl.shared_hbm)
    out2 = nnl.ndarray((M, N), dtype=nnl.float32, buffer=nnl.shared_hbm)
    ops = []
    for src in (a1, b1, a2, b2, a3, b3):
        t = nnl.ndarray(src.shape, dtype=src.dtype, buffer=nnl.sbuf)
        nnisa.dma_copy(dst=t, src=src)
        ops.append(t)
    acc = nnl.ndarray((M, N), dtype=nnl.float32, buffer=nnl.psum)
    nnisa.nc_matmul(acc, ops[0], ops[1])  # first write of the group: overwrites (fresh PSUM is NaN)
    nnisa.nc_matmul(acc, ops[2], ops[3])  # accumulates
    r1 = nnl.ndarray((M, N), dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.tensor_copy(dst=r1, src=acc)  # the read ends the accumulation group
    nnisa.nc_matmul(acc, ops[4], ops[5])  # a new group: overwrites again
    r2 = nnl.ndarray((M, N), dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.tensor_copy(dst=r2, src=acc)
    nnisa.dma_copy(dst=out1, src=r1)
    nnisa.dma_copy(dst=out2, src=r2)
    return out1, out2


def test_new_nc_matmul_accumulate_none_groups() -> None:
    """New API accumulate=None: first write overwrites, later writes add, a read ends the group."""
    a1, b1, a2, b2, a3, b3 = (rand(64, n) for n in (32, 16, 32, 16, 32, 16))
    out1, out2 = n_accumulate_auto(a1, b1, a2, b2, a3, b3)
    assert not np.isnan(out1).any(), "first matmul of a group must overwrite (not add to) fresh PSUM"
    np.testing.assert_allclose(out1, f64(a1).T @ f64(b1) + f64(a2).T @ f64(b2), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out2, f64(a3).T @ f64(b3), rtol=1e-5, atol=1e-5)


@nnki.jit
def n_accumulate_flag(a, b, flag):
    K, M = a.shape
    _, N = b.shape
    out = nnl.ndarray((M, N), dtype=nnl.float32, buffer=nnl.shared_hbm)
    s = nnl.ndarray((K, M), dtype=a.dtype, buffer=nnl.sbuf)
    m = nnl.ndarray((K, N), dtype=b.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=s, src=a)
    nnisa.dma_copy(dst=m, src=b)
    acc = nnl.ndarray((M, N), dtype=nnl.float32, buffer=nnl.psum)
    nnisa.nc_matmul(acc, s, m)
    nnisa.nc_matmul(acc, s, m)
    nnisa.nc_matmul(acc, s, m, accumulate=flag)
    r = nnl.ndarray((M, N), dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.tensor_copy(dst=r, src=acc)
    nnisa.dma_copy(dst=out, src=r)
    return out


@pytest.mark.parametrize("flag, times", [(None, 3), (True, 3), (False, 1)])
def test_new_nc_matmul_accumulate_flag(flag, times) -> None:
    """accumulate=True adds to the group, accumulate=False overwrites it."""
    a, b = rand(32, 16), rand(32, 24)
    np.testing.assert_allclose(n_accumulate_flag(a, b, flag), times * (f64(a).T @ f64(b)), rtol=1e-5, atol=1e-5)


# ======================================================= 3. new-API integer indexing (Top 10 #3, §2.2)
@nnki.jit
def n_int_index(a):
    P, F = a.shape
    t = nnl.ndarray((P, F), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=t, src=a)
    t3 = nnl.ndarray((P, 4, F), dtype=a.dtype, buffer=nnl.sbuf)
    SEEN["sbuf_row"] = tuple(t[2].shape)
    SEEN["sbuf_col"] = tuple(t[:, 3].shape)
    SEEN["sbuf_3d_mid"] = tuple(t3[:, 1].shape)
    SEEN["hbm_row"] = tuple(a[2].shape)
    SEEN["hbm_elem"] = tuple(a[2, 3:5].shape)
    row = nnl.ndarray((F,), dtype=a.dtype, buffer=nnl.shared_hbm)
    nnisa.dma_copy(dst=row, src=t[2])  # SBUF [1, F] -> HBM [F]: same element count
    return row


def test_new_integer_index_sbuf_keeps_partition_dim_hbm_drops() -> None:
    """SBUF t[i] keeps a size-1 partition dim; a free-dim int drops unless < 2-D; HBM a[i] drops the dim."""
    a = rand(8, 16)
    row = n_int_index(a)
    assert SEEN["sbuf_row"] == (1, 16)
    assert SEEN["sbuf_col"] == (8, 1)
    assert SEEN["sbuf_3d_mid"] == (8, 16)
    assert SEEN["hbm_row"] == (16,)
    assert SEEN["hbm_elem"] == (2,)
    np.testing.assert_array_equal(row, a[2])


# ====================================================== 4. fresh on-chip memory (Top 10 #10, §6)
@nnki.jit
def n_fresh(a, dt):
    P, F = a.shape
    out = nnl.ndarray((P, F), dtype=dt, buffer=nnl.shared_hbm)
    t = nnl.ndarray((P, F), dtype=dt, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=t[:, 0:1], src=a[:, 0:1])  # only column 0 is written
    nnisa.dma_copy(dst=out, src=t)
    return out


@pytest.mark.parametrize("dt, poison", [(np.float32, np.nan), (np.int32, 4), (np.int8, 4), (BF16, np.nan)],
                         ids=["fp32", "int32", "int8", "bf16"])
def test_fresh_on_chip_memory_reads_as_sentinel(dt, poison) -> None:
    """The simulator fills fresh allocations with NaN (floats) / 4 (ints) so unwritten reads show up."""
    a = np.arange(32, dtype=np.float32).reshape(4, 8).astype(dt)
    out = n_fresh(a, dt)
    assert out.dtype == np.dtype(dt)
    np.testing.assert_array_equal(out[:, 0], a[:, 0])
    rest = out[:, 1:].astype(np.float64)
    if np.isnan(poison):
        assert np.isnan(rest).all()
    else:
        assert (rest == poison).all()


# ============================================================ 5. low precision stays low (Top 10 #4)
@nki.jit
def c_add_keep(a, b):
    SEEN["c_in_dtype"] = a.dtype
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x, y = nl.load(a), nl.load(b)
    SEEN["c_tile_dtype"] = x.dtype
    nl.store(out, value=nl.add(x, y))
    return out


@nnki.jit
def n_add_keep(a, b):
    SEEN["n_in_dtype"] = a.dtype
    out = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.shared_hbm)
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    y = nnl.ndarray(a.shape, dtype=b.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    nnisa.dma_copy(dst=y, src=b)
    r = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.tensor_tensor(dst=r, data1=x, data2=y, op=nnl.add)
    nnisa.dma_copy(dst=out, src=r)
    return out


@pytest.mark.parametrize("kernel, key", [(c_add_keep, "c_in_dtype"), (n_add_keep, "n_in_dtype")],
                         ids=["classic", "new"])
@pytest.mark.parametrize("dt", [BF16, np.float16], ids=["bf16", "fp16"])
def test_low_precision_inputs_stay_low_and_results_round(kernel, key, dt) -> None:
    """bf16 inputs are bf16 inside the kernel; results are computed in fp32 and rounded (RNE) to bf16."""
    a, b = rand(16, 64, dtype=dt), rand(16, 64, dtype=dt)
    b[0, 0], a[0, 0] = np.float32(1.0).astype(dt), np.float32(2.0 ** -9).astype(dt)  # a tie case for bf16
    out = kernel(a, b)
    assert np.dtype(SEEN[key]) == np.dtype(dt)
    assert out.dtype == np.dtype(dt)
    expected = (a.astype(np.float32) + b.astype(np.float32)).astype(dt)
    np.testing.assert_array_equal(out.view(np.uint16), expected.view(np.uint16))


def test_classic_load_keeps_bf16_tile() -> None:
    a = rand(4, 8, dtype=BF16)
    c_add_keep(a, a)
    assert np.dtype(SEEN["c_tile_dtype"]) == BF16


# ============================================================ 6. float -> int casts (Top 10 #4)
CAST_IN = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.49, 126.6, 300.0, -300.0, 1e10, -1e10, 65535.5, 7.5],
                   dtype=np.float32)


def rne_saturate(x: np.ndarray, dt: Any) -> np.ndarray:
    info = np.iinfo(dt)
    return np.clip(np.rint(x.astype(np.float64)), info.min, info.max).astype(dt)


@nnki.jit
def n_cast(a, dt):
    P, F = a.shape
    out = nnl.ndarray((P, F), dtype=dt, buffer=nnl.shared_hbm)
    x = nnl.ndarray((P, F), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    y = nnl.ndarray((P, F), dtype=dt, buffer=nnl.sbuf)
    nnisa.tensor_copy(dst=y, src=x)
    nnisa.dma_copy(dst=out, src=y)
    return out


@nnki.jit
def n_cast_act(a, dt):
    P, F = a.shape
    out = nnl.ndarray((P, F), dtype=dt, buffer=nnl.shared_hbm)
    x = nnl.ndarray((P, F), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    y = nnl.ndarray((P, F), dtype=dt, buffer=nnl.sbuf)
    nnisa.tensor_scalar(dst=y, data=x, op0=nnl.add, operand0=0.0)
    nnisa.dma_copy(dst=out, src=y)
    return out


@nki.jit
def c_cast(a, dt):
    out = nl.ndarray(a.shape, dtype=dt, buffer=nl.shared_hbm)
    nl.store(out, value=nl.copy(nl.load(a), dtype=dt))
    return out


@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.int16, np.uint16, np.int32], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("kernel", [n_cast, n_cast_act, c_cast], ids=["new_tensor_copy", "new_tensor_scalar", "classic_copy"])
def test_float_to_int_cast_rounds_half_even_and_saturates(kernel, dt) -> None:
    a = CAST_IN.reshape(1, -1)
    out = kernel(a, dt)
    assert out.dtype == np.dtype(dt)
    np.testing.assert_array_equal(out, rne_saturate(a, dt))


# ================================================= 7. classic type promotion (Top 10 #5, §2.8)
FP8E4, FP8E5 = np.dtype(ml_dtypes.float8_e4m3), np.dtype(ml_dtypes.float8_e5m2)
PROMOTION = [
    (np.float16, BF16, np.float32),
    (FP8E4, FP8E5, BF16),
    (FP8E4, np.float16, np.float16),
    (FP8E5, BF16, BF16),
    (np.float32, BF16, np.float32),
    (BF16, np.int32, BF16),
    (np.int8, np.float16, np.float16),
    (np.int8, np.uint8, np.int16),
    (np.int8, np.uint16, np.int32),
    (np.uint16, np.int32, np.int32),
    (np.int32, np.uint32, np.float32),
    (np.int16, np.int8, np.int16),
]


@nki.jit
def c_binop(a, b):
    r = nl.add(nl.load(a), nl.load(b))
    out = nl.ndarray(a.shape, dtype=r.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=r)
    return out


@pytest.mark.parametrize("x, y, want", PROMOTION,
                         ids=[f"{np.dtype(x).name}+{np.dtype(y).name}" for x, y, _ in PROMOTION])
def test_classic_binary_promotion(x, y, want) -> None:
    a = np.array([[1, 2, 3, 4]], dtype=np.float32).astype(x)
    b = np.array([[2, 1, 0, 1]], dtype=np.float32).astype(y)
    out = c_binop(a, b)
    assert out.dtype == np.dtype(want)
    assert out.astype(np.float64).tolist() == [[3, 3, 3, 5]]
    out_rev = c_binop(b, a)  # promotion is symmetric
    assert out_rev.dtype == np.dtype(want)


@nki.jit
def c_weak(a, how):
    x = nl.load(a)
    if how == "op_float":
        r = x + 1.2
    elif how == "op_float_exact":  # 1.5 is exact in bf16/fp16: the documented rule still says fp32
        r = x + 1.5
    elif how == "nl_float":
        r = nl.add(x, 1.2)
    elif how == "nl_float_dtype":
        r = nl.add(x, 1.2, dtype=a.dtype)
    elif how == "nl_int":
        r = nl.add(x, 2)
    else:
        r = nl.multiply(x, 2, dtype=a.dtype)
    out = nl.ndarray(a.shape, dtype=r.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=r)
    return out


WEAK = [
    (BF16, "op_float", np.float32), (BF16, "nl_float", np.float32), (np.float16, "nl_float", np.float32),
    (np.float16, "op_float", np.float32), (BF16, "op_float_exact", np.float32),
    (BF16, "nl_float_dtype", BF16), (np.int8, "nl_int", np.int32), (np.int8, "typed_dtype", np.int8),
    (np.float32, "nl_float", np.float32),
]
WEAK_VALUE = {"op_float": (1.0, 1.2), "op_float_exact": (1.0, 1.5), "nl_float": (1.0, 1.2),
              "nl_float_dtype": (1.0, 1.2), "nl_int": (1.0, 2), "typed_dtype": (2.0, 0)}


@pytest.mark.parametrize("dt, how, want", WEAK, ids=[f"{np.dtype(d).name}-{h}" for d, h, _ in WEAK])
def test_classic_weak_scalar_widens_unless_dtype(dt, how, want) -> None:
    """An untyped Python float promotes a bf16/fp16 tile to fp32 (int: int8 -> int32) unless dtype= is given."""
    a = np.array([[1, 2, 3, 4]], dtype=np.float32).astype(dt)
    out = c_weak(a, how)
    assert out.dtype == np.dtype(want)
    mul, add = WEAK_VALUE[how]
    expect = (a.astype(np.float32) * np.float32(mul) + np.float32(add)).astype(want)  # fp32 compute, cast on write
    np.testing.assert_array_equal(out, expect)


# ================================================================ 8. classic masks (§2.7)
@nki.jit
def c_ragged(a):
    N, F = a.shape
    P = 128
    out = nl.ndarray((N, F), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(F)[None, :]
    for t in nl.affine_range((N + P - 1) // P):
        x = nl.load(a[t * P + i_p, i_f], mask=(t * P + i_p < N))
        y = nl.multiply(x, 2.0, mask=(t * P + i_p < N))
        nl.store(out[t * P + i_p, i_f], value=y, mask=(t * P + i_p < N))
    return out


@pytest.mark.parametrize("n", [200, 128, 1, 257])
def test_classic_mask_ragged_last_tile(n) -> None:
    a = rand(n, 24)
    np.testing.assert_array_equal(c_ragged(a), a * 2)


@nki.jit
def c_masked_store(a, fill):
    N, F = a.shape
    out = nl.ndarray((N, F), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(N)[:, None]
    i_f = nl.arange(F)[None, :]
    nl.store(out[i_p, i_f], value=nl.load(fill))
    x = nl.load(a)
    nl.store(out[i_p, i_f], value=nl.exp(x), mask=(i_p < 5) & (i_f >= 2))
    return out


def test_classic_masked_off_output_elements_untouched() -> None:
    a, fill = rand(8, 6), np.full((8, 6), -7.0, np.float32)
    out = c_masked_store(a, fill)
    expect = fill.copy()
    expect[:5, 2:] = np.exp(a[:5, 2:])
    np.testing.assert_allclose(out, expect, rtol=1e-6)


# ============================================================== 9. SPMD grids (§1.2, §1.3)
@nki.jit
def c_spmd(a):
    N, F = a.shape
    g = nl.program_id(0)
    G = nl.num_programs()
    SEEN.setdefault("c_spmd", []).append((int(g), int(G), int(nl.num_programs(0)), int(nl.program_ndim())))
    rows = N // G
    out = nl.ndarray((N, F), dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a[g * rows:(g + 1) * rows, :])
    nl.store(out[g * rows:(g + 1) * rows, :], value=nl.add(x, g * 100.0 + G))
    return out


def test_classic_spmd_grid_runs_every_program_on_shared_output() -> None:
    SEEN["c_spmd"] = []
    a = rand(256, 32)
    out = c_spmd[2](a)
    assert sorted(SEEN["c_spmd"]) == [(0, 2, 2, 1), (1, 2, 2, 1)]
    expect = a.astype(np.float64).copy()
    expect[:128] += 2.0
    expect[128:] += 102.0
    np.testing.assert_allclose(out, expect, rtol=1e-6)


@nki.jit
def c_spmd2d(a):
    N, F = a.shape
    g0, g1 = nl.program_id(0), nl.program_id(1)
    SEEN.setdefault("c_spmd2d", []).append((int(g0), int(g1), int(nl.num_programs()), int(nl.num_programs(0)),
                                            int(nl.num_programs(1)), int(nl.program_ndim())))
    out = nl.ndarray((N, F), dtype=a.dtype, buffer=nl.shared_hbm)
    blk = g0 * nl.num_programs(1) + g1
    x = nl.load(a[blk * 8:(blk + 1) * 8, :])
    nl.store(out[blk * 8:(blk + 1) * 8, :], value=nl.multiply(x, blk + 1.0))
    return out


def test_classic_spmd_2d_grid() -> None:
    SEEN["c_spmd2d"] = []
    a = rand(48, 4)
    out = c_spmd2d[2, 3](a)
    assert sorted(s[:2] for s in SEEN["c_spmd2d"]) == [(i, j) for i in range(2) for j in range(3)]
    assert {s[2:] for s in SEEN["c_spmd2d"]} == {(6, 2, 3, 2)}
    expect = a.astype(np.float64) * np.repeat(np.arange(1, 7), 8)[:, None]
    np.testing.assert_allclose(out, expect, rtol=1e-6)


@nnki.jit
def n_spmd(a):
    N, F = a.shape
    g = nnl.program_id(0)
    G = nnl.num_programs()
    SEEN.setdefault("n_spmd", []).append((int(g), int(G)))
    rows = N // G
    out = nnl.ndarray((N, F), dtype=a.dtype, buffer=nnl.shared_hbm)
    x = nnl.ndarray((rows, F), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a[g * rows:(g + 1) * rows, :])
    y = nnl.ndarray((rows, F), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.tensor_scalar(dst=y, data=x, op0=nnl.add, operand0=g * 100.0 + G)
    nnisa.dma_copy(dst=out[g * rows:(g + 1) * rows, :], src=y)
    return out


@pytest.mark.parametrize("tgt", ["trn2", "trn3"])
def test_new_lnc2_launch_two_programs_share_output(tgt) -> None:
    SEEN["n_spmd"] = []
    a = rand(256, 16)
    with target(tgt):
        out = n_spmd[2](a)
    assert sorted(SEEN["n_spmd"]) == [(0, 2), (1, 2)]
    expect = a.astype(np.float64).copy()
    expect[:128] += 2.0
    expect[128:] += 102.0
    np.testing.assert_allclose(out, expect, rtol=1e-6)


def test_new_lnc2_launch_rejected_on_trn1() -> None:
    """trn1 has no logical NeuronCores (LNC 1): kernel[2] is a launch error there."""
    with target("trn1"), pytest.raises(NkiError):
        n_spmd[2](rand(256, 16))


def test_new_launch_without_grid_is_one_program() -> None:
    SEEN["n_spmd"] = []
    a = rand(64, 8)
    np.testing.assert_allclose(n_spmd(a), a.astype(np.float64) + 1.0, rtol=1e-6)
    assert SEEN["n_spmd"] == [(0, 1)]


# ================================================================ 10. reductions (§2.5, Top 10 #6)
@nki.jit
def c_reduce(a, kind):
    x = nl.load(a)
    if kind == "sum":
        r = nl.sum(x, axis=1, keepdims=True)
    elif kind == "max":
        r = nl.max(x, axis=[1], keepdims=True)
    elif kind == "min":
        r = nl.min(x, axis=1, keepdims=True)
    elif kind == "mean":
        r = nl.mean(x, axis=1, keepdims=True)
    else:
        r = nisa.tensor_reduce(np.add, x, axis=[1], keepdims=True)
    SEEN["c_reduce"] = tuple(r.shape)
    out = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=r)
    return out


REDUCE_REF = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean, "isa_sum": np.sum}


@pytest.mark.parametrize("kind", list(REDUCE_REF))
def test_classic_reduction_keeps_p1_tile(kind) -> None:
    a = rand(32, 40)
    out = c_reduce(a, kind)
    assert SEEN["c_reduce"] == (32, 1)
    np.testing.assert_allclose(out, REDUCE_REF[kind](a.astype(np.float64), axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


@nnki.jit
def n_reduce(a, op, axis):
    P = a.shape[0]
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    r = nnl.ndarray((P, 1), dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.tensor_reduce(dst=r, op=op, data=x, axis=axis)
    out = nnl.ndarray((P, 1), dtype=nnl.float32, buffer=nnl.shared_hbm)
    nnisa.dma_copy(dst=out, src=r)
    return out


NEW_REDUCE = [((16, 40), 1, "add"), ((16, 40), 1, "maximum"), ((16, 5, 8), (1, 2), "add"),
              ((16, 3, 4, 5), (1, 2, 3), "minimum")]


@pytest.mark.parametrize("shape, axis, op", NEW_REDUCE, ids=[f"{len(s)}d-{o}" for s, _, o in NEW_REDUCE])
def test_new_tensor_reduce_into_p1_tile(shape, axis, op) -> None:
    a = rand(*shape)
    ref = {"add": np.sum, "maximum": np.max, "minimum": np.min}[op]
    out = n_reduce(a, getattr(nnl, op), axis)
    np.testing.assert_allclose(out, ref(f64(a).reshape(shape[0], -1), axis=1, keepdims=True), rtol=1e-5, atol=1e-5)


# ======================================================= 11. activation = op(data*scale + bias) (§3.3)
ACT_OPS = [("exp", np.exp), ("tanh", np.tanh), ("copy", lambda x: x), ("square", np.square),
           ("relu", lambda x: np.maximum(x, 0)), ("sigmoid", lambda x: 1 / (1 + np.exp(-x)))]


@nki.jit
def c_act(a, bias, op, scale):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x, b = nl.load(a), nl.load(bias)
    s = nl.load(scale) if hasattr(scale, "shape") else scale
    nl.store(out, value=nisa.activation(op=op, data=x, bias=b, scale=s))
    return out


@nnki.jit
def n_act(a, bias, op, scale):
    P, F = a.shape
    out = nnl.ndarray((P, F), dtype=nnl.float32, buffer=nnl.shared_hbm)
    x = nnl.ndarray((P, F), dtype=a.dtype, buffer=nnl.sbuf)
    b = nnl.ndarray((P, 1), dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    nnisa.dma_copy(dst=b, src=bias)
    s = scale
    if hasattr(scale, "shape"):
        s = nnl.ndarray((P, 1), dtype=nnl.float32, buffer=nnl.sbuf)
        nnisa.dma_copy(dst=s, src=scale)
    y = nnl.ndarray((P, F), dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.activation(dst=y, op=op, data=x, bias=b, scale=s)
    nnisa.dma_copy(dst=out, src=y)
    return out


@pytest.mark.parametrize("vector_scale", [False, True], ids=["scalar_scale", "vector_scale"])
@pytest.mark.parametrize("name, ref", ACT_OPS, ids=[n for n, _ in ACT_OPS])
@pytest.mark.parametrize("api", ["classic", "new"])
def test_activation_is_op_of_scale_times_data_plus_bias(api, name, ref, vector_scale) -> None:
    a, bias = rand(16, 32), rand(16, 1)
    scale = rand(16, 1, lo=0.5, hi=1.5) if vector_scale else 0.75
    kernel, lang = (c_act, nl) if api == "classic" else (n_act, nnl)
    out = kernel(a, bias, getattr(lang, name), scale)
    x = f64(a) * (f64(scale) if vector_scale else 0.75) + f64(bias)
    np.testing.assert_allclose(out, ref(x), rtol=2e-3, atol=2e-3)


@nnki.jit
def n_act_reduce(a):
    P, F = a.shape
    out = nnl.ndarray((P, 1), dtype=nnl.float32, buffer=nnl.shared_hbm)
    x = nnl.ndarray((P, F), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    y = nnl.ndarray((P, F), dtype=nnl.float32, buffer=nnl.sbuf)
    r = nnl.ndarray((P, 1), dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.activation(dst=y, op=nnl.exp, data=x, scale=2.0, reduce_op=nnl.add, reduce_res=r,
                     reduce_cmd=nnisa.reduce_cmd.reset_reduce)
    nnisa.dma_copy(dst=out, src=r)
    return out


def test_new_activation_sum_reduction_into_reduce_res() -> None:
    a = rand(8, 24)
    np.testing.assert_allclose(n_act_reduce(a), np.exp(2 * f64(a)).sum(axis=1, keepdims=True), rtol=1e-4)


# ============================================================= 12. tensor_scalar / reverse (§3.2)
TS_CASES = [
    # op0, operand0, reverse0, op1, operand1(None|"vec"|scalar), reverse1, reference
    ("subtract", 10.0, False, None, None, False, lambda x, v: x - 10),
    ("subtract", 10.0, True, None, None, False, lambda x, v: 10 - x),
    ("divide", 2.0, True, None, None, False, lambda x, v: 2 / x),
    ("multiply", 3.0, False, "add", "vec", False, lambda x, v: x * 3 + v),
    ("add", 1.0, False, "subtract", "vec", True, lambda x, v: v - (x + 1)),
    ("subtract", "vec", True, "multiply", 0.5, False, lambda x, v: (v - x) * 0.5),
    ("maximum", 0.25, False, "minimum", 0.75, False, lambda x, v: np.clip(x, 0.25, 0.75)),
]


@nki.jit
def c_ts(a, vec, op0, operand0, reverse0, op1, operand1, reverse1):
    v = nl.load(vec)
    o0 = v if isinstance(operand0, str) else operand0
    o1 = v if isinstance(operand1, str) else operand1
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.tensor_scalar(nl.load(a), op0, o0, reverse0=reverse0, op1=op1, operand1=o1,
                                           reverse1=reverse1))
    return out


@nnki.jit
def n_ts(a, vec, op0, operand0, reverse0, op1, operand1, reverse1):
    P, F = a.shape
    x = nnl.ndarray((P, F), dtype=a.dtype, buffer=nnl.sbuf)
    v = nnl.ndarray((P, 1), dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    nnisa.dma_copy(dst=v, src=vec)
    o0 = v if isinstance(operand0, str) else operand0
    o1 = v if isinstance(operand1, str) else operand1
    y = nnl.ndarray((P, F), dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.tensor_scalar(y, x, op0, o0, reverse0=reverse0, op1=op1, operand1=o1, reverse1=reverse1)
    out = nnl.ndarray((P, F), dtype=nnl.float32, buffer=nnl.shared_hbm)
    nnisa.dma_copy(dst=out, src=y)
    return out


@pytest.mark.parametrize("case", TS_CASES, ids=[f"{c[0]}{'-rev0' if c[2] else ''}-{c[3]}{'-rev1' if c[5] else ''}"
                                                for c in TS_CASES])
@pytest.mark.parametrize("api", ["classic", "new"])
def test_tensor_scalar_with_reverse(api, case) -> None:
    op0, operand0, reverse0, op1, operand1, reverse1, ref = case
    a, vec = rand(8, 16, lo=0.5, hi=2.0), rand(8, 1)
    kernel, lang = (c_ts, nl) if api == "classic" else (n_ts, nnl)
    out = kernel(a, vec, getattr(lang, op0), operand0, reverse0, getattr(lang, op1) if op1 else None, operand1,
                 reverse1)
    np.testing.assert_allclose(out, ref(f64(a), f64(vec)), rtol=1e-5, atol=1e-6)


# ================================================================= 13. bn_stats / bn_aggr (§3.2)
@nnki.jit
def n_bn(a):
    P, F = a.shape
    chunks = (F + 511) // 512
    x = nnl.ndarray((P, F), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    stats = nnl.ndarray((P, 6 * chunks), dtype=nnl.float32, buffer=nnl.sbuf)
    for c in range(chunks):
        nnisa.bn_stats(dst=stats[:, 6 * c:6 * (c + 1)], data=x[:, 512 * c:min(512 * (c + 1), F)])
    mv = nnl.ndarray((P, 2), dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.bn_aggr(dst=mv, data=stats)
    out = nnl.ndarray((P, 2), dtype=nnl.float32, buffer=nnl.shared_hbm)
    nnisa.dma_copy(dst=out, src=mv)
    return out


@nki.jit
def c_bn(a):
    P = a.shape[0]
    out = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    stats = nisa.bn_stats(nl.load(a))
    SEEN["c_bn_stats"] = tuple(stats.shape)
    nl.store(out, value=nisa.bn_aggr(stats))
    return out


@pytest.mark.parametrize("f", [7, 64, 512, 1024, 1000])
def test_new_bn_stats_aggr_mean_and_variance(f) -> None:
    a = rand(32, f, lo=-3, hi=5)
    out = n_bn(a)
    np.testing.assert_allclose(out[:, 0], f64(a).mean(axis=1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out[:, 1], f64(a).var(axis=1), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("f", [6, 255, 512])
def test_classic_bn_stats_six_values_then_mean_var(f) -> None:
    a = rand(16, f, lo=-2, hi=3)
    out = c_bn(a)
    assert SEEN["c_bn_stats"] == (16, 6)
    np.testing.assert_allclose(out[:, 0], f64(a).mean(axis=1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out[:, 1], f64(a).var(axis=1), rtol=1e-4, atol=1e-5)


# ========================================================= 14. iota / affine_select (§3.2)
@nnki.jit
def n_iota(shape, pattern, offset, cm):
    t = nnl.ndarray(shape, dtype=nnl.int32, buffer=nnl.sbuf)
    nnisa.iota(t, pattern, offset=offset, channel_multiplier=cm)
    out = nnl.ndarray(shape, dtype=nnl.int32, buffer=nnl.shared_hbm)
    nnisa.dma_copy(dst=out, src=t)
    return out


IOTA = [((4, 8), [[1, 8]], 0, 0), ((4, 8), [[1, 8]], 5, 100), ((6, 4, 3), [[10, 4], [1, 3]], 0, 1000),
        ((4, 6), [[-1, 6]], 2, 1)]


@pytest.mark.parametrize("shape, pattern, offset, cm", IOTA, ids=[f"iota{i}" for i in range(len(IOTA))])
def test_new_iota_pattern(shape, pattern, offset, cm) -> None:
    """value = offset + p * channel_multiplier + sum_k step_k * idx_k over the pattern's [step, num] dims."""
    out = n_iota(shape, pattern, offset, cm)
    P = shape[0]
    grids = np.meshgrid(*[np.arange(n) for _, n in pattern], indexing="ij")
    free = sum(step * g for (step, _), g in zip(pattern, grids))
    expect = offset + np.arange(P).reshape((P,) + (1,) * len(pattern)) * cm + free[None]
    np.testing.assert_array_equal(out.reshape(P, -1), expect.reshape(P, -1))


@nnki.jit
def n_causal(a, q0):
    P, F = a.shape
    x = nnl.ndarray((P, F), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    y = nnl.ndarray((P, F), dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.affine_select(dst=y, pattern=[[-1, F]], channel_multiplier=1, on_true_tile=x, on_false_value=-9984.0,
                        cmp_op=nnl.greater_equal, offset=q0)
    out = nnl.ndarray((P, F), dtype=nnl.float32, buffer=nnl.shared_hbm)
    nnisa.dma_copy(dst=out, src=y)
    return out


@nki.jit
def c_causal(a, q0):
    P, F = a.shape
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(F)[None, :]
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    y = nisa.affine_select(pred=(q0 + i_p - i_f >= 0), on_true_tile=nl.load(a), on_false_value=-9984.0)
    nl.store(out, value=y)
    return out


@pytest.mark.parametrize("q0", [0, 16])
@pytest.mark.parametrize("kernel", [n_causal, c_causal], ids=["new_pattern", "classic_pred"])
def test_affine_select_builds_causal_mask(kernel, q0) -> None:
    a = rand(32, 48)
    out = kernel(a, q0)
    p, f = np.arange(32)[:, None], np.arange(48)[None, :]
    np.testing.assert_array_equal(out, np.where(q0 + p - f >= 0, a, np.float32(-9984.0)))


@nki.jit
def c_iota(shape):
    P, F = shape
    i_p = nl.arange(P)[:, None]
    i_f = nl.arange(F)[None, :]
    out = nl.ndarray((P, F), dtype=nl.int32, buffer=nl.shared_hbm)
    nl.store(out, value=nisa.iota(i_f + 10 * i_p, dtype=nl.int32))
    return out


def test_classic_iota_of_affine_expression() -> None:
    out = c_iota((4, 6))
    np.testing.assert_array_equal(out, np.arange(6)[None, :] + 10 * np.arange(4)[:, None])


# ============================================================ 15. classic par_dim block dims (§2.1)
@nki.jit
def c_blocks(a):
    N, F = a.shape
    B = N // 128
    out = nl.ndarray((N, F), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((B, nl.par_dim(128), F), dtype=a.dtype, buffer=nl.sbuf)
    SEEN["block_shape"] = tuple(t[0].shape)
    for i in nl.affine_range(B):
        t[i] = nl.load(a[i * 128:(i + 1) * 128, :])
    for i in nl.affine_range(B):
        nl.store(out[i * 128:(i + 1) * 128, :], value=nl.multiply(t[i], float(1)) * 2.0 + t[B - 1 - i])
    return out


def test_classic_par_dim_block_dims_index_per_block() -> None:
    a = rand(512, 64)
    out = c_blocks(a)
    assert SEEN["block_shape"] == (128, 64)
    blocks = a.reshape(4, 128, 64)
    expect = (f64(blocks) * 2 + f64(blocks[::-1])).reshape(512, 64)
    np.testing.assert_allclose(out, expect, rtol=1e-6)


# ======================================================= 16. transposes (§2.6, §3.1)
@nki.jit
def c_transpose(a):
    P, F = a.shape
    out = nl.ndarray((F, P), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nisa.nc_transpose(nl.load(a))
    SEEN["c_transpose"] = (tuple(t.shape), str(getattr(t.buffer, "label", t.buffer)))
    nl.store(out, value=nl.copy(t, dtype=a.dtype))
    return out


@nnki.jit
def n_transpose(a):
    P, F = a.shape
    x = nnl.ndarray((P, F), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    t = nnl.ndarray((F, P), dtype=a.dtype, buffer=nnl.psum)
    nnisa.nc_transpose(dst=t, data=x)
    y = nnl.ndarray((F, P), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.tensor_copy(dst=y, src=t)
    out = nnl.ndarray((F, P), dtype=a.dtype, buffer=nnl.shared_hbm)
    nnisa.dma_copy(dst=out, src=y)
    return out


@pytest.mark.parametrize("shape", [(128, 128), (32, 96), (96, 5)])
@pytest.mark.parametrize("kernel", [c_transpose, n_transpose], ids=["classic", "new"])
def test_tensor_engine_transpose(kernel, shape) -> None:
    a = rand(*shape)
    np.testing.assert_array_equal(kernel(a), a.T)


def test_classic_nc_transpose_lands_in_psum() -> None:
    c_transpose(rand(16, 8))
    shape, buf = SEEN["c_transpose"]
    assert shape == (8, 16) and "psum" in buf.lower()


# ============================================= 17. classic element-wise broadcasting (§2.4, §4)
@nki.jit
def c_bcast(a, col, row):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    r = nl.add(nl.multiply(x, nl.load(col)), nl.load(row))  # (P,F)*(P,1) + (1,F)
    nl.store(out, value=r)
    return out


def test_classic_nl_binary_ops_broadcast_numpy_style() -> None:
    a, col, row = rand(16, 8), rand(16, 1), rand(1, 8)
    np.testing.assert_allclose(c_bcast(a, col, row), f64(a) * f64(col) + f64(row), rtol=1e-6, atol=1e-6)


@nnki.jit
def n_tt_bcast(a, b):
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    y = nnl.ndarray(b.shape, dtype=b.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    nnisa.dma_copy(dst=y, src=b)
    r = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.tensor_tensor(dst=r, data1=x, data2=y, op=nnl.add)
    out = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.shared_hbm)
    nnisa.dma_copy(dst=out, src=r)
    return out


def test_new_tensor_tensor_never_broadcasts() -> None:
    """tensor_tensor needs the same P and the same N for both inputs (broadcast with tensor_scalar)."""
    with pytest.raises(NkiError):
        n_tt_bcast(rand(16, 8), rand(16, 1))
    a, b = rand(16, 8), rand(16, 8)
    np.testing.assert_allclose(n_tt_bcast(a, b), f64(a) + f64(b), rtol=1e-6)


# ======================================================= 18. targets (Top 10 #1, §3.1, §5)
@nnki.jit
def n_matmul_dst(st, mv, dst_dtype):
    K, M = st.shape
    _, N = mv.shape
    s = nnl.ndarray((K, M), dtype=st.dtype, buffer=nnl.sbuf)
    m = nnl.ndarray((K, N), dtype=mv.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=s, src=st)
    nnisa.dma_copy(dst=m, src=mv)
    acc = nnl.ndarray((M, N), dtype=dst_dtype, buffer=nnl.psum)
    nnisa.nc_matmul(acc, s, m)  # target-dependent line
    r = nnl.ndarray((M, N), dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.tensor_copy(dst=r, src=acc)
    out = nnl.ndarray((M, N), dtype=nnl.float32, buffer=nnl.shared_hbm)
    nnisa.dma_copy(dst=out, src=r)
    return out


MM_LINE = n_matmul_dst.original.__code__.co_firstlineno + 9  # the nc_matmul call (decorator line + 9)

TARGET_CASES = [
    # (name, K, M, N, input dtype, psum dtype, targets that accept)
    ("bf16_psum_dst", 64, 32, 64, BF16, BF16, {"trn3"}),
    ("moving_free_1024", 64, 32, 1024, BF16, np.float32, {"trn3"}),
    ("moving_free_512", 64, 32, 512, BF16, np.float32, {"trn1", "trn2", "trn3"}),
    ("moving_free_4096_fp32", 16, 8, 4096, BF16, np.float32, {"trn3"}),
]


@pytest.mark.parametrize("tgt", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize("case", TARGET_CASES, ids=[c[0] for c in TARGET_CASES])
def test_matmul_limits_depend_on_target(case, tgt) -> None:
    _, k, m, n, in_dt, dst_dt, ok_on = case
    st, mv = rand(k, m, dtype=in_dt), rand(k, n, dtype=in_dt)
    with target(tgt):
        if tgt in ok_on:
            out = n_matmul_dst(st, mv, dst_dt)
            ref = f64(st).T @ f64(mv)
            tol = 1e-2 if np.dtype(dst_dt) == BF16 else 1e-4
            np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)
        else:
            with pytest.raises(NkiError) as e:
                n_matmul_dst(st, mv, dst_dt)
            assert e.value.location is not None
            assert e.value.location.line == MM_LINE, (e.value.code, e.value.message)
            assert e.value.code.startswith(("err_", "sim_"))


@nki.jit
def c_matmul_wide(st, mv):
    _, M = st.shape
    _, N = mv.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.copy(nisa.nc_matmul(nl.load(st), nl.load(mv)), dtype=nl.float32))
    return out


def test_classic_matmul_moving_free_limit_on_trn1() -> None:
    """The classic API defaults to trn1: moving free size above 512 is an error there."""
    st, mv = rand(32, 16), rand(32, 1024)
    with pytest.raises(NkiError):
        c_matmul_wide(st, mv)


@nki.jit
def c_partitions(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a))
    return out


def test_partition_dim_limit_is_128() -> None:
    """A tile's partition dim (dim 0) is at most 128 on every target."""
    np.testing.assert_array_equal(c_partitions(np.ones((128, 4), np.float32)), np.ones((128, 4), np.float32))
    for tgt in ("trn1", "trn3"):
        with target(tgt), pytest.raises(NkiError) as e:
            c_partitions(np.ones((129, 4), np.float32))
        assert e.value.code == "err_num_partition_exceed_arch_limit"


# ======================================================= 19. classic inputs are immutable (§1.2, §4)
@nki.jit
def c_write_input(a):
    nl.store(a, value=nl.load(a))
    return a


@nki.jit
def c_write_output_parameter(a, out):
    nl.store(out, value=nl.load(a))


def test_classic_kernel_inputs_are_immutable() -> None:
    # an error at the store for a kernel that returns its outputs (SDK >= 2.21 rejects it; issue 22)
    with pytest.raises(NkiError) as e:
        c_write_input(np.ones((4, 4), np.float32))
    assert e.value.code == "err_cannot_update_immutable_parameter"
    assert e.value.location is not None and e.value.location.line == c_write_input.original.__code__.co_firstlineno + 2


def test_classic_output_parameters_are_a_warning() -> None:
    # the older convention (outputs passed in, nothing returned; the SDK's simulation-mode examples): a warning
    from nki_agent.toolchain.sim.kernel import DEFAULTS, LaunchDefaults

    records: list = []
    tok = DEFAULTS.set(LaunchDefaults(observer=records.append))
    out = np.zeros((4, 4), np.float32)
    try:
        c_write_output_parameter(np.ones((4, 4), np.float32), out)
    finally:
        DEFAULTS.reset(tok)
    codes = [(w.code, w.severity) for w in records[-1].warnings]
    assert ("err_cannot_update_immutable_parameter", "warning") in codes
    assert np.array_equal(out, np.ones((4, 4), np.float32))


# ============================================ 20. new API: classic-only features removed (§1.3)
@nnki.jit
def n_uses_arange(a):
    out = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.shared_hbm)
    i_p = nnl.arange(a.shape[0])[:, None]  # noqa: F841
    return out


def test_new_api_has_no_arange() -> None:
    with pytest.raises(NkiError) as e:
        n_uses_arange(np.ones((4, 4), np.float32))
    assert e.value.location is not None
    assert e.value.location.line == n_uses_arange.original.__code__.co_firstlineno + 3


@nnki.jit
def n_hbm_output(a):
    out = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.hbm)
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    nnisa.dma_copy(dst=out, src=x)
    return out


def test_new_api_outputs_must_be_shared_hbm() -> None:
    with pytest.raises(NkiError):
        n_hbm_output(np.ones((4, 4), np.float32))


@nnki.jit
def n_dma_from_psum(a):
    P, F = a.shape
    x = nnl.ndarray((P, F), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    t = nnl.ndarray((F, P), dtype=a.dtype, buffer=nnl.psum)
    nnisa.nc_transpose(dst=t, data=x)
    out = nnl.ndarray((F, P), dtype=a.dtype, buffer=nnl.shared_hbm)
    nnisa.dma_copy(dst=out, src=t)
    return out


def test_new_dma_copy_cannot_read_psum() -> None:
    with pytest.raises(NkiError) as e:
        n_dma_from_psum(np.ones((8, 8), np.float32))
    assert e.value.code == "err_unsupported_memory"


# ============================================= 21. new API: ranges are plain unrolled loops (§1.3)
@nnki.jit
def n_carried(a):
    P, F = a.shape
    acc = nnl.ndarray((P, 1), dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.memset(dst=acc, value=0.0)
    for j in nnl.affine_range(F):  # a loop-carried dependency is fine: affine_range is just range
        nnisa.tensor_tensor(dst=acc, data1=acc, data2=_col(a, j), op=nnl.add)
    out = nnl.ndarray((P, 1), dtype=nnl.float32, buffer=nnl.shared_hbm)
    nnisa.dma_copy(dst=out, src=acc)
    return out


def _col(a, j):
    c = nnl.ndarray((a.shape[0], 1), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=c, src=a[:, j:j + 1])
    return c


def test_new_affine_range_allows_carried_dependency() -> None:
    a = rand(8, 5)
    np.testing.assert_allclose(n_carried(a), f64(a).sum(axis=1, keepdims=True), rtol=1e-5)


# =========================================================== 22. nl.ds is a slice (§2.3)
@nnki.jit
def n_ds(a):
    P = a.shape[0]
    x = nnl.ndarray((P, 4), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a[nnl.ds(0, P), nnl.ds(3, 4)])
    out = nnl.ndarray((P, 4), dtype=a.dtype, buffer=nnl.shared_hbm)
    nnisa.dma_copy(dst=out, src=x)
    return out


def test_ds_is_start_size_slice() -> None:
    a = rand(8, 12)
    np.testing.assert_array_equal(n_ds(a), a[:, 3:7])


# ============================================ 23. new nl binary ops do not broadcast (Top 10 #7)
@nnki.jit
def n_nl_add(a, b):
    x = nnl.load(a)
    y = nnl.load(b)
    r = nnl.add(x, y)
    out = nnl.ndarray(r.shape, dtype=r.dtype, buffer=nnl.shared_hbm)
    nnl.store(out, r)
    return out


def test_new_nl_binary_ops_need_equal_shapes() -> None:
    a, b = rand(16, 8), rand(16, 8)
    np.testing.assert_allclose(n_nl_add(a, b), f64(a) + f64(b), rtol=1e-6)
    with pytest.raises(NkiError):
        n_nl_add(rand(16, 8), rand(16, 1))


# ==================================================== 24. buffer placement (Top 10 #9, §4)
@nnki.jit
def n_placement(a, case):
    P, F = a.shape
    s1 = nnl.ndarray((P, F), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=s1, src=a)
    p1 = nnl.ndarray((P, F), dtype=nnl.float32, buffer=nnl.psum)
    p2 = nnl.ndarray((P, F), dtype=nnl.float32, buffer=nnl.psum)
    nnisa.tensor_copy(dst=p1, src=s1)
    nnisa.tensor_copy(dst=p2, src=s1)
    r = nnl.ndarray((P, F), dtype=nnl.float32, buffer=nnl.sbuf)
    if case == "two_psum_inputs":
        nnisa.tensor_tensor(dst=r, data1=p1, data2=p2, op=nnl.add)
    elif case == "one_psum_input":
        nnisa.tensor_tensor(dst=r, data1=p1, data2=s1, op=nnl.add)
    elif case == "iota_into_psum":
        nnisa.iota(p1, [[1, F]])
        nnisa.tensor_copy(dst=r, src=p1)
    elif case == "matmul_operand_in_psum":
        mm = nnl.ndarray((F, F), dtype=nnl.float32, buffer=nnl.psum)
        nnisa.nc_matmul(mm, p1, s1)
        nnisa.tensor_copy(dst=r, src=p2)
    out = nnl.ndarray((P, F), dtype=nnl.float32, buffer=nnl.shared_hbm)
    nnisa.dma_copy(dst=out, src=r)
    return out


@pytest.mark.parametrize("case, ok", [("one_psum_input", True), ("two_psum_inputs", False),
                                      ("iota_into_psum", False), ("matmul_operand_in_psum", False)])
def test_new_buffer_placement_rules(case, ok) -> None:
    """Vector ops take at most one PSUM input; GpSimd never touches PSUM; TensorE reads SBUF only."""
    a = rand(8, 8)
    if ok:
        np.testing.assert_allclose(n_placement(a, case), 2 * f64(a), rtol=1e-6)
    else:
        with pytest.raises(NkiError) as e:
            n_placement(a, case)
        assert e.value.code == "err_unsupported_memory", e.value.message


# ============================================= 25. nc_matmul input dtype pairing (§3.1)
def test_nc_matmul_fp32_operand_needs_fp32_partner() -> None:
    """If one matmul input is fp32/tf32 the other must be too."""
    with pytest.raises(NkiError):
        n_matmul(rand(16, 8), rand(16, 8, dtype=BF16))
    a, b = rand(16, 8), rand(16, 8)
    np.testing.assert_allclose(n_matmul(a, b), f64(a).T @ f64(b), rtol=1e-5, atol=1e-6)


# ================================================ 26. tensor_copy is bit-exact for equal dtypes (§3.2)
def test_tensor_copy_same_dtype_is_bit_exact_for_big_int32() -> None:
    a = np.array([[16777217, -16777219, 2 ** 31 - 1, -2 ** 31]], dtype=np.int32)  # not representable in fp32
    np.testing.assert_array_equal(n_cast(a, np.int32), a)


@pytest.mark.parametrize("dt", [BF16, np.float16, FP8E5], ids=["bf16", "fp16", "fp8e5m2"])
def test_dma_copy_casts_float_with_rne(dt) -> None:
    """dma_copy between dtypes converts through fp32 with round-to-nearest-even."""
    a = rand(4, 64, lo=-4, hi=4)
    out = n_fresh_cast(a, dt)
    assert out.dtype == np.dtype(dt)
    np.testing.assert_array_equal(out.astype(np.float32), a.astype(dt).astype(np.float32))


@nnki.jit
def n_fresh_cast(a, dt):
    P, F = a.shape
    t = nnl.ndarray((P, F), dtype=dt, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=t, src=a)
    out = nnl.ndarray((P, F), dtype=dt, buffer=nnl.shared_hbm)
    nnisa.dma_copy(dst=out, src=t)
    return out


# ======================================== 27. scalar_tensor_tensor = (data op0 s) op1 t (§3.2)
@nnki.jit
def n_stt(a, b, vec):
    P, F = a.shape
    x = nnl.ndarray((P, F), dtype=a.dtype, buffer=nnl.sbuf)
    y = nnl.ndarray((P, F), dtype=b.dtype, buffer=nnl.sbuf)
    v = nnl.ndarray((P, 1), dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    nnisa.dma_copy(dst=y, src=b)
    nnisa.dma_copy(dst=v, src=vec)
    r = nnl.ndarray((P, F), dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.scalar_tensor_tensor(dst=r, data=x, op0=nnl.subtract, operand0=v, op1=nnl.multiply, operand1=y)
    out = nnl.ndarray((P, F), dtype=nnl.float32, buffer=nnl.shared_hbm)
    nnisa.dma_copy(dst=out, src=r)
    return out


def test_scalar_tensor_tensor() -> None:
    a, b, v = rand(8, 16), rand(8, 16), rand(8, 1)
    np.testing.assert_allclose(n_stt(a, b, v), (f64(a) - f64(v)) * f64(b), rtol=1e-5, atol=1e-7)


# ================================================= 28. reduction axis rules (Top 10 #6, §3.2)
@nnki.jit
def n_reduce_to(a, axis, dst_shape):
    x = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=x, src=a)
    r = nnl.ndarray(dst_shape, dtype=nnl.float32, buffer=nnl.sbuf)
    nnisa.tensor_reduce(dst=r, op=nnl.add, data=x, axis=axis)  # the line under test
    out = nnl.ndarray(dst_shape, dtype=nnl.float32, buffer=nnl.shared_hbm)
    nnisa.dma_copy(dst=out, src=r)
    return out


REDUCE_LINE = n_reduce_to.original.__code__.co_firstlineno + 5


@pytest.mark.parametrize("shape, axis, dst", [((8, 4, 5), (1,), (8, 5)), ((8, 16), 0, (1, 16)),
                                              ((8, 16), (0, 1), (1, 1))],
                         ids=["non_trailing", "partition", "partition_and_free"])
def test_new_tensor_reduce_rejects_partition_or_non_trailing_axes(shape, axis, dst) -> None:
    """tensor_reduce axes are free axes only, and must be the trailing ones ending at the last dim."""
    with pytest.raises(NkiError) as e:
        n_reduce_to(rand(*shape), axis, dst)
    assert e.value.location is not None and e.value.location.line == REDUCE_LINE


def test_new_tensor_reduce_trailing_axes_ok() -> None:
    a = rand(8, 4, 5)
    np.testing.assert_allclose(n_reduce_to(a, (2,), (8, 4)), f64(a).sum(axis=2), rtol=1e-5)


# ============================================================ 29. on-chip tiles are >= 2-D (§4)
@nnki.jit
def n_one_d(a):
    t = nnl.ndarray((a.shape[0],), dtype=a.dtype, buffer=nnl.sbuf)
    nnisa.dma_copy(dst=t, src=a)
    out = nnl.ndarray(a.shape, dtype=a.dtype, buffer=nnl.shared_hbm)
    nnisa.dma_copy(dst=out, src=t)
    return out


def test_new_sbuf_tiles_need_two_dims() -> None:
    with pytest.raises(NkiError):
        n_one_d(rand(8))


# ===================================================== 30. classic softmax / mean dtype (§2.5)
@nki.jit
def c_softmax(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, value=nl.softmax(nl.load(a), axis=1))
    return out


def test_classic_softmax_along_free_axis() -> None:
    a = rand(16, 32, lo=-4, hi=4)
    e = np.exp(f64(a) - f64(a).max(axis=1, keepdims=True))
    np.testing.assert_allclose(c_softmax(a), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


@nki.jit
def c_mean(a):
    r = nl.mean(nl.load(a), axis=1, keepdims=True)
    out = nl.ndarray(r.shape, dtype=r.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=r)
    return out


def test_classic_mean_of_ints_is_fp32() -> None:
    a = np.array([[1, 2], [3, 6]], dtype=np.int32)
    out = c_mean(a)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [[1.5], [4.5]])


# ======================================================= 31. new memset value type (§1.3 item 9)
@nnki.jit
def n_memset(shape, dt, value):
    t = nnl.ndarray(shape, dtype=dt, buffer=nnl.sbuf)
    nnisa.memset(dst=t, value=value)
    out = nnl.ndarray(shape, dtype=dt, buffer=nnl.shared_hbm)
    nnisa.dma_copy(dst=out, src=t)
    return out


def test_new_memset_fills_and_int_needs_int_value() -> None:
    np.testing.assert_array_equal(n_memset((4, 8), np.int32, 7), np.full((4, 8), 7, np.int32))
    np.testing.assert_array_equal(n_memset((4, 8), np.float32, -2.5), np.full((4, 8), -2.5, np.float32))
    with pytest.raises(NkiError):
        n_memset((4, 8), np.int32, 1.5)
