"""The simulated ``nki.isa`` namespace for both generations.

Classic signatures return a new tile (``c = nisa.nc_matmul(a, b)``, with ``mask=``/``dtype=``); new
signatures take ``dst`` first and return nothing useful. Both call the shared semantics in
``ops/isa.py`` and ``ops/matmul.py``.
"""

from __future__ import annotations

import enum
import types
from typing import Any

import numpy as np

from nki_agent.toolchain.facts import dtypes
from nki_agent.toolchain.facts.errors import NkiError
from ..location import caller_location
from . import runtime
from .instrument import instrument
from .record import wrap_namespace
from .buffers import psum, sbuf
from .language import UnsupportedApi
from .ops import common as c
from .ops import isa as core
from .ops.matmul import matmul_values, transpose_values
from .tensor import Tensor, describe, values_of, view_of, write_into


class engine(enum.IntEnum):
    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    dma = 4
    vector = 5
    sync = 6


class reduce_cmd(enum.IntEnum):
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class oob_mode(enum.IntEnum):
    error = 0
    skip = 1


class dge_mode(enum.IntEnum):
    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class nc_version(enum.IntEnum):
    gen2 = 2
    gen3 = 3
    gen4 = 4


class matmul_perf_mode(enum.Enum):
    none = "none"
    double_row = "double_row"


class dma_engine(enum.IntEnum):
    dma = 1
    gpsimd_dma = 2


def get_nc_version() -> nc_version:
    s = runtime.current()
    return nc_version(s.target.nc_version if s else 2)


def _dtype_for(dtype: Any, *operands: Any) -> Any:
    return c.result_dtype(dtype, *[o for o in operands if isinstance(o, Tensor)])


# ---------------------------------------------------------------------------------- classic API
def c_nc_matmul(stationary: Any, moving: Any, is_stationary_onezero: bool = False, is_moving_onezero: bool = False,
                is_transpose: bool = False, tile_position: Any = (), tile_size: Any = (), mask: Any = None,
                **kw: Any) -> Tensor:
    c.sim("nc_matmul")
    res = matmul_values("nc_matmul", stationary, moving, perf_mode=kw.get("perf_mode"))
    return c.emit(res, dtypes.float32, c.mask_of(mask), psum, fresh=True)


def c_nc_transpose(data: Any, mask: Any = None, dtype: Any = None, engine: Any = engine.unknown, **kw: Any) -> Tensor:
    c.sim("nc_transpose")
    vals, eng = transpose_values("nc_transpose", data, engine)
    out_dt = dtype if dtype is not None else data.dtype
    return c.emit(vals, out_dt, c.mask_of(mask), psum if eng == "tensor" else sbuf)


def c_activation(op: Any, data: Any, bias: Any = None, scale: Any = 1.0, reduce_op: Any = None, reduce_res: Any = None,
                 reduce_cmd: Any = reduce_cmd.idle, mask: Any = None, dtype: Any = None, **kw: Any) -> Tensor:
    c.sim("activation")
    res = core.activation_values(op, data, bias, scale)
    core.reduce_into("activation", res, reduce_op, reduce_res, reduce_cmd)
    return c.emit(res, _dtype_for(dtype, data), c.mask_of(mask))


def c_activation_reduce(op: Any, data: Any, reduce_op: Any = None, reduce_res: Any = None, bias: Any = None,
                        scale: Any = 1.0, mask: Any = None, dtype: Any = None, **kw: Any) -> Tensor:
    return c_activation(op, data, bias, scale, reduce_op, reduce_res, reduce_cmd.reset_reduce, mask, dtype)


def c_tensor_tensor(data1: Any, data2: Any, op: Any, dtype: Any = None, mask: Any = None, engine: Any = None,
                    **kw: Any) -> Tensor:
    c.sim("tensor_tensor")
    res = core.tensor_tensor_values(data1, data2, op)
    return c.emit(res, _dtype_for(dtype, data1, data2), c.mask_of(mask))


def c_tensor_scalar(data: Any, op0: Any, operand0: Any = None, reverse0: bool = False, op1: Any = None,
                    operand1: Any = None, reverse1: bool = False, dtype: Any = None, mask: Any = None,
                    engine: Any = None, **kw: Any) -> Tensor:
    c.sim("tensor_scalar")
    res = core.tensor_scalar_values(data, op0, operand0, reverse0, op1, operand1, reverse1)
    return c.emit(res, _dtype_for(dtype, data), c.mask_of(mask))


def c_scalar_tensor_tensor(data: Any = None, op0: Any = None, operand0: Any = None, op1: Any = None,
                           operand1: Any = None, reverse0: bool = False, reverse1: bool = False, dtype: Any = None,
                           mask: Any = None, **kw: Any) -> Tensor:
    c.sim("scalar_tensor_tensor")
    res = _stt(data, op0, operand0, op1, operand1, reverse0, reverse1)
    return c.emit(res, _dtype_for(dtype, data, operand1), c.mask_of(mask))


def _stt(data: Any, op0: Any, operand0: Any, op1: Any, operand1: Any, reverse0: bool, reverse1: bool) -> np.ndarray:
    first = core.tensor_scalar_values(data, op0, operand0, reverse0)
    if not isinstance(operand1, Tensor):
        raise NkiError("sim_invalid_argument", "scalar_tensor_tensor operand1 must be a tile", caller_location())
    c.check_same_partitions("scalar_tensor_tensor", (("data", data), ("operand1", operand1)))
    c.check_not_both_psum("scalar_tensor_tensor", data, operand1)
    b = c.fp32(operand1).reshape(first.shape)
    return c.apply_alu("scalar_tensor_tensor", op1, b, first) if reverse1 else c.apply_alu("scalar_tensor_tensor", op1, first, b)


def c_tensor_reduce(op: Any, data: Any, axis: Any, mask: Any = None, dtype: Any = None, negate: bool = False,
                    keepdims: bool = False, **kw: Any) -> Tensor:
    c.sim("tensor_reduce")
    res = core.tensor_reduce_values(op, data, axis, negate, keepdims)
    return c.emit(res, _dtype_for(dtype, data), c.mask_of(mask))


def c_tensor_copy(src: Any, mask: Any = None, dtype: Any = None, engine: Any = None, **kw: Any) -> Tensor:
    c.sim("tensor_copy")
    res = core.tensor_copy_values(src)
    return c.emit(np.array(res), dtype if dtype is not None else src.dtype, c.mask_of(mask))


def c_reciprocal(data: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> Tensor:
    c.sim("reciprocal")
    c.require_on_chip("reciprocal", "data", data)
    with np.errstate(all="ignore"):
        res = 1.0 / c.fp32(data)
    return c.emit(res, _dtype_for(dtype, data), c.mask_of(mask))


def c_iota(expr: Any, dtype: Any, mask: Any = None, **kw: Any) -> Tensor:
    c.sim("iota")
    vals = np.asarray(c.values(expr), dtype=np.int64)
    if vals.ndim < 2:
        raise NkiError("err_1d_arange_not_supported", "iota needs a 2-D index expression", caller_location())
    return c.emit(vals.astype(np.float64), dtype, c.mask_of(mask))


def c_memset(shape: Any, value: Any, dtype: Any, mask: Any = None, engine: Any = None, **kw: Any) -> Tensor:
    c.sim("memset")
    shp = tuple(int(s) for s in shape)
    return c.emit(np.full(shp, value, dtype=np.float64), dtype, c.mask_of(mask))


def c_affine_select(pred: Any, on_true_tile: Any, on_false_value: Any, mask: Any = None, dtype: Any = None,
                    **kw: Any) -> Tensor:
    c.sim("affine_select")
    # GpSimd cannot read PSUM, but official kernels pass PSUM here and the compiler inserts the copy
    c.require_on_chip("affine_select", "on_true_tile", on_true_tile)
    res = core.affine_select_classic(pred, on_true_tile, on_false_value)
    return c.emit(res, _dtype_for(dtype, on_true_tile), c.mask_of(mask))


def dma_copy(dst: Any = None, src: Any = None, mask: Any = None, dst_rmw_op: Any = None, **kw: Any) -> None:
    """``dma_copy``: element counts of src and dst must match; dtype converts through fp32."""
    s = c.sim("dma_copy")
    for n, t in (("dst", dst), ("src", src)):
        if not isinstance(t, Tensor):
            raise NkiError("sim_invalid_argument", f"dma_copy {n} must be a tensor", caller_location())
    if src.buffer.kind == "psum" and s.generation == runtime.NEW:
        raise NkiError("err_unsupported_memory", "dma_copy cannot read PSUM; copy to SBUF with nisa.tensor_copy first",
                       caller_location(), c.where(src))
    if dst.buffer.kind == "psum":
        raise NkiError("err_unsupported_memory", "dma_copy cannot write PSUM", caller_location(), c.where(dst))
    m = c.mask_of(mask)
    if src.size != dst.size:
        raise NkiError("sim_shape_mismatch",
                       f"dma_copy element counts differ: src {describe(src)} has {src.size}, dst {describe(dst)} "
                       f"has {dst.size}", caller_location(), c.where(src) + c.where(dst))
    m_dst = m
    mode = kw.get("oob_mode")
    if mode is not None and int(mode) == oob_mode.skip:
        m, m_dst = _skip_out_of_bounds(src, dst, m)
    vals = values_of(src, m)
    vals = vals.reshape(dst.shape)
    if vals.dtype != dst.dtype:
        vals = dtypes.cast(dtypes.to_fp32(vals), dst.dtype)
    if dst_rmw_op is not None:
        cur = c.fp32(dst)
        vals = c.apply_alu("dma_copy", dst_rmw_op, cur, dtypes.to_fp32(vals))
    write_into(dst, vals, m_dst)


def _skip_out_of_bounds(src: Tensor, dst: Tensor, mask: np.ndarray | None) -> tuple[Any, Any]:
    """``oob_mode=skip``: the elements whose (dynamic) index on either side is out of range are not copied,
    the rest are (SDK ``test_nki_isa_dma_copy``: the skipped rows of the destination keep their values).
    The predicates of src and dst, elements paired in row-major order as the copy pairs them."""
    keep = np.ones(src.size, dtype=bool)
    for t in (src, dst):
        ok = view_of(t).in_bounds()
        if ok is not None:
            keep &= ok.reshape(-1)
    if mask is not None:
        keep &= np.broadcast_to(mask, src.shape).reshape(-1)
    if keep.all():
        return mask, mask
    return keep.reshape(src.shape), keep.reshape(dst.shape)


def c_bn_stats(data: Any, mask: Any = None, dtype: Any = None, **kw: Any) -> Tensor:
    c.sim("bn_stats")
    return c.emit(core.bn_stats_values(data), dtype if dtype is not None else dtypes.float32, c.mask_of(mask))


def c_bn_aggr(data: Any, mask: Any = None, dtype: Any = None, **kw: Any) -> Tensor:
    c.sim("bn_aggr")
    return c.emit(core.bn_aggr_values(data), dtype if dtype is not None else dtypes.float32, c.mask_of(mask))


# -------------------------------------------------------------------------------------- new API
def n_nc_matmul(dst: Any, stationary: Any, moving: Any, is_stationary_onezero: bool = False,
                is_moving_onezero: bool = False, is_transpose: bool = False, accumulate: Any = None,
                tile_position: Any = (), tile_size: Any = (), perf_mode: Any = None, name: Any = None) -> None:
    c.sim("nc_matmul")
    _need_dst("nc_matmul", dst)
    core.nc_matmul_into("nc_matmul", dst, stationary, moving, accumulate, perf_mode)


def n_nc_transpose(dst: Any, data: Any, engine: Any = engine.unknown, name: Any = None) -> None:
    c.sim("nc_transpose")
    _need_dst("nc_transpose", dst)
    core.transpose_into("nc_transpose", dst, data, engine)


def n_activation(dst: Any, op: Any, data: Any, bias: Any = None, scale: Any = 1.0, reduce_op: Any = None,
                 reduce_res: Any = None, reduce_cmd: Any = reduce_cmd.idle, name: Any = None) -> None:
    c.sim("activation")
    _need_dst("activation", dst)
    res = core.activation_values(op, data, bias, scale)
    core.reduce_into("activation", res, reduce_op, reduce_res, reduce_cmd)
    c.store_into("activation", dst, res)


def n_tensor_tensor(dst: Any, data1: Any, data2: Any, op: Any, engine: Any = None, name: Any = None) -> None:
    c.sim("tensor_tensor")
    _need_dst("tensor_tensor", dst)
    c.store_into("tensor_tensor", dst, core.tensor_tensor_values(data1, data2, op))


def n_tensor_scalar(dst: Any, data: Any, op0: Any, operand0: Any = None, reverse0: bool = False, op1: Any = None,
                    operand1: Any = None, reverse1: bool = False, engine: Any = None, name: Any = None) -> None:
    c.sim("tensor_scalar")
    _need_dst("tensor_scalar", dst)
    c.store_into("tensor_scalar", dst,
                 core.tensor_scalar_values(data, op0, operand0, reverse0, op1, operand1, reverse1))


def n_scalar_tensor_tensor(dst: Any, data: Any, op0: Any, operand0: Any, op1: Any, operand1: Any,
                           reverse0: bool = False, reverse1: bool = False, name: Any = None) -> None:
    c.sim("scalar_tensor_tensor")
    _need_dst("scalar_tensor_tensor", dst)
    c.store_into("scalar_tensor_tensor", dst, _stt(data, op0, operand0, op1, operand1, reverse0, reverse1))


def n_tensor_reduce(dst: Any, op: Any, data: Any, axis: Any, negate: bool = False, keepdims: bool = False,
                    name: Any = None) -> None:
    c.sim("tensor_reduce")
    _need_dst("tensor_reduce", dst)
    c.store_into("tensor_reduce", dst, core.tensor_reduce_values(op, data, axis, negate, keepdims))


def n_tensor_copy(dst: Any, src: Any, engine: Any = None, name: Any = None) -> None:
    c.sim("tensor_copy")
    _need_dst("tensor_copy", dst)
    vals = core.tensor_copy_values(src)
    if vals.dtype != dst.dtype:
        vals = dtypes.to_fp32(vals)
    c.store_into("tensor_copy", dst, np.asarray(vals))


def n_reciprocal(dst: Any, data: Any, name: Any = None) -> None:
    c.sim("reciprocal")
    _need_dst("reciprocal", dst)
    with np.errstate(all="ignore"):
        c.store_into("reciprocal", dst, 1.0 / c.fp32(data))


def n_iota(dst: Any, pattern: Any, offset: Any = 0, channel_multiplier: Any = 0, name: Any = None) -> None:
    c.sim("iota")
    _need_dst("iota", dst)
    c.require_on_chip("iota", "dst", dst, allow_psum=False)
    vals = core.iota_pattern_values(dst.shape, pattern, offset, channel_multiplier)
    c.store_into("iota", dst, vals.astype(np.float64))


def n_memset(dst: Any, value: Any, engine: Any = None, name: Any = None) -> None:
    c.sim("memset")
    _need_dst("memset", dst)
    if dtypes.is_int(dst.dtype) and isinstance(value, float) and not float(value).is_integer():
        raise NkiError("sim_invalid_argument", f"memset value {value} must be an integer for {dtypes.name(dst.dtype)} dst",
                       caller_location())
    write_into(dst, np.full(dst.shape, value, dtype=np.float64 if not dtypes.is_int(dst.dtype) else np.int64))


def n_affine_select(dst: Any, pattern: Any, channel_multiplier: Any, on_true_tile: Any, on_false_value: Any,
                    cmp_op: Any = None, offset: Any = 0, name: Any = None) -> None:
    c.sim("affine_select")
    _need_dst("affine_select", dst)
    c.require_on_chip("affine_select", "on_true_tile", on_true_tile)
    x = c.fp32(on_true_tile)
    aff = core.iota_pattern_values(x.shape, pattern, offset, channel_multiplier).reshape(x.shape).astype(np.float32)
    cond = c.apply_alu("affine_select", cmp_op if cmp_op is not None else "equal", aff, np.zeros_like(aff)) != 0
    c.store_into("affine_select", dst, np.where(cond, x, np.float32(on_false_value)))


def n_bn_stats(dst: Any, data: Any, name: Any = None) -> None:
    c.sim("bn_stats")
    _need_dst("bn_stats", dst)
    c.store_into("bn_stats", dst, core.bn_stats_values(data))


def n_bn_aggr(dst: Any, data: Any, name: Any = None) -> None:
    c.sim("bn_aggr")
    _need_dst("bn_aggr", dst)
    c.store_into("bn_aggr", dst, core.bn_aggr_values(data))


def n_dma_copy(dst: Any, src: Any, priority: Any = None, oob_mode: Any = None, dge_mode: Any = None,
               engine: Any = None, name: Any = None) -> None:
    dma_copy(dst=dst, src=src, oob_mode=oob_mode)


def _need_dst(api: str, dst: Any) -> None:
    if not isinstance(dst, Tensor):
        raise NkiError("sim_invalid_argument",
                       f"'{api}' takes the destination tile as its first argument (new NKI API); got {type(dst).__name__}",
                       caller_location())


_ENUMS = {"engine": engine, "reduce_cmd": reduce_cmd, "oob_mode": oob_mode, "dge_mode": dge_mode,
          "nc_version": nc_version, "matmul_perf_mode": matmul_perf_mode, "dma_engine": dma_engine,
          "get_nc_version": get_nc_version, "tensor_engine": engine.tensor, "vector_engine": engine.vector,
          "scalar_engine": engine.scalar, "gpsimd_engine": engine.gpsimd, "unknown_engine": engine.unknown}

_CLASSIC = {"nc_matmul": c_nc_matmul, "nc_transpose": c_nc_transpose, "activation": c_activation,
            "activation_reduce": c_activation_reduce, "tensor_tensor": c_tensor_tensor,
            "tensor_scalar": c_tensor_scalar, "scalar_tensor_tensor": c_scalar_tensor_tensor,
            "tensor_reduce": c_tensor_reduce, "tensor_copy": c_tensor_copy, "reciprocal": c_reciprocal,
            "iota": c_iota, "memset": c_memset, "affine_select": c_affine_select, "dma_copy": dma_copy,
            "bn_stats": c_bn_stats, "bn_aggr": c_bn_aggr}

_NEW = {"nc_matmul": n_nc_matmul, "nc_transpose": n_nc_transpose, "activation": n_activation,
        "tensor_tensor": n_tensor_tensor, "tensor_scalar": n_tensor_scalar,
        "scalar_tensor_tensor": n_scalar_tensor_tensor, "tensor_reduce": n_tensor_reduce,
        "tensor_copy": n_tensor_copy, "reciprocal": n_reciprocal, "iota": n_iota, "memset": n_memset,
        "affine_select": n_affine_select, "dma_copy": n_dma_copy, "bn_stats": n_bn_stats, "bn_aggr": n_bn_aggr}


def _checked_call(fn: Any, qualname: str, generation: str) -> Any:
    """Turn a wrong call shape into a diagnostic naming the NKI signature, not our function."""
    import functools
    import inspect

    sig = inspect.signature(fn)

    takes_dtype = "dtype" in sig.parameters

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if generation == runtime.NEW and not takes_dtype and "dtype" in kwargs:
            kwargs.pop("dtype")  # official new-API tutorials still pass dtype=; the result dtype is dst.dtype
        if generation == runtime.CLASSIC and "dst" in kwargs and "dst" not in sig.parameters:
            # the classic SDK raises TypeError here; swallowing dst= would silently drop the result
            raise NkiError("sim_invalid_argument",
                           f"{qualname}: classic ISA calls return their result and take no 'dst=' (that is the new "
                           f"`nki` API's form); write `y = {qualname}(...)` or migrate the kernel to `import nki`",
                           caller_location())
        try:
            return fn(*args, **kwargs)
        except TypeError:
            try:
                sig.bind(*args, **kwargs)
            except TypeError as e:  # the call shape was wrong: say so in NKI's terms
                raise _call_error(e, args, kwargs) from None
            raise  # a TypeError from inside the op: report it as it is

    def _call_error(e: TypeError, args: tuple[Any, ...], kwargs: dict[str, Any]) -> NkiError:
        if generation == runtime.NEW and "mask" in kwargs:
            bad = "mask"
            return NkiError("sim_removed_api",
                            f"{qualname}: '{bad}=' was removed in the new NKI API (the output dtype is dst.dtype; "
                            "masks become slices)", caller_location())
        params = ", ".join(p for p in sig.parameters if p not in ("kw", "name"))
        hint = " (new API: the destination tile comes first)" if generation == runtime.NEW else ""
        return NkiError("sim_invalid_argument", f"{qualname}({params}){hint}: {str(e).split(': ', 1)[-1]}",
                        caller_location())

    return call


def build(generation: str) -> types.ModuleType:
    name = "neuronxcc.nki.isa" if generation == runtime.CLASSIC else "nki.isa"
    mod = types.ModuleType(name, "NKI ISA (embedded simulator)")
    mod.__dict__.update(_ENUMS)
    table = _CLASSIC if generation == runtime.CLASSIC else _NEW
    calls: dict[str, Any] = {k: instrument(_checked_call(f, f"{name}.{k}", generation), f"nisa.{k}")
                             for k, f in table.items()}
    calls["get_nc_version"] = _ENUMS["get_nc_version"]
    wrap_namespace(calls, "nisa")  # every call is an event of the traced program (record.py)
    mod.__dict__.update(calls)

    def __getattr__(attr: str) -> Any:
        raise UnsupportedApi("sim_unsupported_api", f"{name}.{attr} is not modelled by the embedded simulator",
                             caller_location())

    mod.__getattr__ = __getattr__  # type: ignore[method-assign]
    return mod


def _register_extra() -> None:
    """Instructions kept in ops/isa_extra.py and ops/isa_movement.py (merged there), so the core table stays small."""
    from .ops import isa_extra

    _CLASSIC.update(isa_extra.CLASSIC)
    _NEW.update(isa_extra.NEW)


_register_extra()
