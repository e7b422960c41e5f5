"""TensorE: ``nc_matmul`` (stationary.T @ moving into PSUM), ``nc_transpose``, ``nl.matmul``, ``nl.transpose``.

The checks here are the ones users hit most: contraction on the partition dim of both operands,
stationary free <= 128, moving free <= one PSUM bank (512 fp32 on trn1/trn2), operands in SBUF,
result in PSUM in fp32 (bf16 allowed on trn3), and matching fp32-ness of the two operands.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nki_agent.toolchain.facts import dtypes
from nki_agent.toolchain.facts.errors import NkiError
from ...location import caller_location
from .. import runtime
from ..buffers import psum, sbuf
from ..tensor import Tensor, describe, values_of, view_of, wrap
from ..view import View
from . import common as c

_FP32ISH = ("float32", "tfloat32")


def check_matmul(api: str, stationary: Any, moving: Any, strict_memory: bool,
                 perf_mode: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Validate nc_matmul operands; return their values as ``[K, M]`` and ``[K, N]`` fp32 arrays."""
    s = runtime.require(api)
    t = s.target
    for name, x in (("stationary", stationary), ("moving", moving)):
        if not isinstance(x, Tensor):
            raise NkiError("sim_invalid_argument", f"'{api}' operand '{name}' must be a tile", caller_location())
        c.require_on_chip(api, name, x, allow_psum=not strict_memory)
        dn = dtypes.name(x.dtype)
        if dn not in t.matmul_input_dtypes and not (dn == "float8_e4m3fn" and t.nc_version >= 4):
            raise NkiError("sim_unsupported_dtype",
                           f"'{api}' operand '{name}' has dtype {dn}, which TensorE does not accept on {t.name} "
                           f"(accepted: {', '.join(t.matmul_input_dtypes)})", caller_location(), c.where(x))
    a, b = values_of(stationary), values_of(moving)
    if "double_row" in str(getattr(perf_mode, "value", perf_mode) or ""):
        # double-row mode: operands are [K, 2, M] / [K, 2, N]; the "2" joins the contraction (2 x 128)
        if a.ndim != 3 or b.ndim != 3 or a.shape[1] != 2 or b.shape[1] != 2:
            raise NkiError("sim_invalid_argument",
                           f"double_row nc_matmul needs [K, 2, M] and [K, 2, N] operands, got {describe(stationary)} "
                           f"and {describe(moving)}", caller_location())
        if t.nc_version < 3:
            raise NkiError("sim_unsupported_dtype", f"double_row matmul needs trn2 or later, not {t.name}",
                           caller_location())
        a = a.reshape(a.shape[0] * 2, a.shape[2])
        b = b.reshape(b.shape[0] * 2, b.shape[2])
        return dtypes.to_fp32(a), dtypes.to_fp32(b)
    if a.ndim > 2:
        a = a.reshape(a.shape[0], -1)
    if b.ndim > 2:
        b = b.reshape(b.shape[0], -1)
    if a.ndim < 2:
        a = a.reshape(a.shape[0], 1)
    if b.ndim < 2:
        b = b.reshape(b.shape[0], 1)
    k1, m = a.shape
    k2, n = b.shape
    if k1 != k2:
        raise NkiError("err_num_partition_mismatch",
                       f"contraction (partition) sizes differ in '{api}': stationary {describe(stationary)} vs moving "
                       f"{describe(moving)}; both operands must hold K on the partition dim",
                       caller_location(), c.where(stationary) + c.where(moving))
    if k1 > t.pmax:
        raise NkiError("err_num_partition_exceed_arch_limit",
                       f"number of partitions {k1} (contraction dim) of '{api}' exceed architecture limitation of "
                       f"{t.pmax}.", caller_location(), c.where(stationary))
    if m > t.gemm_stationary_fmax:
        raise NkiError("sim_matmul_operand_limit",
                       f"stationary free size {m} of '{api}' exceeds {t.gemm_stationary_fmax} "
                       f"(tile_size.gemm_stationary_fmax); split M into tiles of {t.gemm_stationary_fmax}",
                       caller_location(), c.where(stationary))
    if n > t.gemm_moving_fmax_bf16 or (n > t.gemm_moving_fmax and t.nc_version < 4):
        raise NkiError("sim_matmul_operand_limit",
                       f"moving free size {n} of '{api}' exceeds {t.gemm_moving_fmax} on {t.name} "
                       f"(tile_size.gemm_moving_fmax, one 2 KiB PSUM bank of fp32); split N into tiles of "
                       f"{t.gemm_moving_fmax}", caller_location(), c.where(moving))
    fa, fb = dtypes.name(stationary.dtype) in _FP32ISH, dtypes.name(moving.dtype) in _FP32ISH
    if strict_memory and fa != fb:
        raise NkiError("sim_unsupported_dtype",
                       f"'{api}': if one operand is fp32/tf32 the other must be too (got {dtypes.name(stationary.dtype)} "
                       f"and {dtypes.name(moving.dtype)})", caller_location())
    if not s.arithmetic:
        return a, b  # a trace-only run: shapes matter, values do not (matmul_values skips the product)
    return dtypes.to_fp32(a), dtypes.to_fp32(b)


def check_psum_dst(api: str, dst: Tensor, n_free: int) -> None:
    t = runtime.require(api).target
    if dst.buffer.kind != "psum":
        raise NkiError("sim_matmul_psum_placement",
                       f"'{api}' writes its result to PSUM, but dst `{dst.name}` lives in {dst.buffer.label}",
                       caller_location(), c.where(dst))
    dn = dtypes.name(dst.dtype)
    if dn not in t.matmul_dst_dtypes:
        raise NkiError("sim_unsupported_dtype",
                       f"nc_matmul dst dtype must be {' or '.join(t.matmul_dst_dtypes)} on gen{t.nc_version} "
                       f"({t.name}), got {dn}", caller_location(), c.where(dst))
    limit = t.gemm_moving_fmax_bf16 if dn == "bfloat16" else t.gemm_moving_fmax
    if n_free > limit:
        raise NkiError("sim_psum_bank_overflow",
                       f"matmul result free size {n_free} exceeds {limit} elements of one PSUM bank on {t.name}",
                       caller_location(), c.where(dst))


def matmul_values(api: str, stationary: Any, moving: Any, strict: bool = True, perf_mode: Any = None) -> np.ndarray:
    a, b = check_matmul(api, stationary, moving, strict, perf_mode)
    if not runtime.require(api).arithmetic:
        return np.zeros((a.shape[1], b.shape[1]), dtype=np.float32)  # trace-only run: the cost is in the shapes
    return a.T @ b  # both fp32 already; a dtype= argument would bypass BLAS


def nl_matmul(x: Any, y: Any, transpose_x: bool = False, mask: Any = None, **kw: Any) -> Tensor:
    """``nl.matmul``: ``x @ y`` (or ``x.T @ y`` with transpose_x) into a PSUM fp32 tile."""
    s = c.sim("matmul")
    if s.generation == runtime.NEW and not transpose_x:
        raise NkiError("sim_invalid_argument",
                       "nl.matmul requires transpose_x=True in the new NKI API: pass x as [K, M]",
                       caller_location())
    if not transpose_x:
        if not isinstance(x, Tensor):
            raise NkiError("sim_invalid_argument", "nl.matmul operand x must be a tile", caller_location())
        xv = values_of(x)
        if xv.shape[1] > s.target.pmax or xv.shape[0] > s.target.gemm_stationary_fmax:
            raise NkiError("sim_matmul_operand_limit",
                           f"nl.matmul x {describe(x)} exceeds [128, 128]; tile M and K to 128",
                           caller_location(), c.where(x))
        xt = wrap(_Transposed(view_of(x), xv.T))
        res = matmul_values("matmul", xt, y, strict=False)
    else:
        res = matmul_values("matmul", x, y, strict=False)
    return c.emit(res, dtypes.float32, c.mask_of(mask), psum, fresh=True)


class _Transposed(View):
    """A read-only transposed stand-in for nl.matmul's implicit transpose."""

    __slots__ = ("_vals",)

    def __init__(self, base: View, vals: np.ndarray) -> None:
        super().__init__(base.storage)
        self._vals = vals

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._vals.shape)

    def read(self, mask: Any = None) -> np.ndarray:
        return self._vals


def nl_transpose(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> Tensor:
    c.sim("transpose")
    c.require_on_chip("transpose", "x", x)
    vals = c.values(x, c.mask_of(mask))
    if vals.ndim != 2:
        raise NkiError("err_exceed_max_supported_dimension",
                       f"parameter '{describe(x)}' of 'transpose' exceed max supported number of dimensions of 2.",
                       caller_location())
    if vals.shape[1] > 128:
        raise NkiError("err_size_of_dimension_exceed_arch_limit",
                       f"size of dimension 1 in '{describe(x)}' of 'transpose' exceed architecture limitation of 128.",
                       caller_location())
    out_dt = dtypes.as_dtype(dtype) if dtype is not None else x.dtype
    return c.emit(np.array(vals.T), out_dt, None, sbuf)


def transpose_values(api: str, data: Any, engine: Any) -> tuple[np.ndarray, str]:
    """Shared checks of nc_transpose; returns (values transposed, engine used: 'tensor'|'vector')."""
    s = runtime.require(api)
    if not isinstance(data, Tensor):
        raise NkiError("sim_invalid_argument", f"'{api}' data must be a tile", caller_location())
    vals = values_of(data)
    vals2 = vals.reshape(vals.shape[0], -1)
    p, f = vals2.shape
    eng = str(getattr(engine, "name", engine) or "").lower()
    use_vector = "vector" in eng or eng == "5"
    if use_vector:
        lim = s.target.vector_transpose_max
        if p > lim or f > lim:
            raise NkiError("err_size_of_dimension_exceed_arch_limit",
                           f"VectorE nc_transpose handles at most {lim}x{lim}, got {p}x{f}", caller_location())
    else:
        c.require_on_chip(api, "data", data, allow_psum=False)
        if f > s.target.pmax:
            raise NkiError("err_size_of_dimension_exceed_arch_limit",
                           f"TensorE nc_transpose free size {f} exceeds 128 (the result's partition dim)",
                           caller_location(), c.where(data))
    return np.array(vals2.T), ("vector" if use_vector else "tensor")
