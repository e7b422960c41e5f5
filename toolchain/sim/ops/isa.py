"""``nki.isa`` instruction semantics shared by both API generations.

Each ``*_values`` function validates operands and returns the fp32 result; the classic wrappers
(``shim/classic_isa.py``) put it in a new tile, the new wrappers (``shim/new_isa.py``) write it
into ``dst``. Semantics follow the nki.isa API reference (sdk 2.26 and 2.32).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nki_agent.toolchain.facts import dtypes
from nki_agent.toolchain.facts.errors import NkiError
from ...location import caller_location
from .. import runtime
from ..index import Index, Mask
from ..tensor import Tensor, describe, storage_of, values_of, view_of, write_into
from . import common as c
from .elementwise import UNARY
from .matmul import check_psum_dst, matmul_values, transpose_values

# reduce_res accumulators of ScalarE persist across activation calls (reduce_cmd semantics)
_IDLE, _RESET, _REDUCE, _RESET_REDUCE, _LOAD_REDUCE = 0, 1, 2, 3, 4


def _vector_operand(api: str, name: str, v: Any, p: int, code: str = "sim_invalid_argument") -> Any:
    """Scalar stays scalar; a tile must be (P, 1) and is returned as a broadcastable fp32 column."""
    if v is None:
        return None
    if isinstance(v, Tensor):
        c.require_on_chip(api, name, v)
        arr = c.fp32(v)
        if arr.ndim < 2 or arr.shape[0] != p or int(np.prod(arr.shape[1:])) != 1:
            raise NkiError(code, f"'{name}' of '{api}' must be a scalar or a ({p}, 1) vector along the partition "
                           f"dim, got {describe(v)}", caller_location(), c.where(v))
        return arr.reshape(p, 1)
    if isinstance(v, (Index, Mask)):
        raise NkiError("sim_invalid_argument", f"'{name}' of '{api}' cannot be an index expression", caller_location())
    return np.float32(v)


def _bcast_col(col: Any, ndim: int) -> Any:
    if isinstance(col, np.ndarray) and ndim > 2:
        return col.reshape(col.shape[0], *([1] * (ndim - 1)))
    return col


def activation_values(op: Any, data: Any, bias: Any = None, scale: Any = 1.0) -> np.ndarray:
    api = "activation"
    if not isinstance(data, Tensor):
        raise NkiError("sim_invalid_argument", "activation data must be a tile", caller_location())
    c.require_on_chip(api, "data", data)
    x = c.fp32(data)
    p = x.shape[0]
    sc = _vector_operand(api, "scale", scale, p, "err_activation_scale_scalar_or_vector")
    bi = _vector_operand(api, "bias", bias, p)
    if isinstance(bias, Tensor) and not dtypes.is_float(bias.dtype):
        raise NkiError("err_activation_bias_invalid_type", "activation bias must be a float32/float16/bfloat16 vector",
                       caller_location(), c.where(bias))
    with np.errstate(all="ignore"):
        y = x * _bcast_col(sc, x.ndim)
        if bi is not None:
            y = y + _bcast_col(bi, x.ndim)
    return c.apply_alu(api, op, y.astype(np.float32))


def reduce_into(api: str, res: np.ndarray, reduce_op: Any, reduce_res: Any, reduce_cmd: Any = None) -> None:
    """Free-dim reduction of an activation result into ``reduce_res`` (a (P, 1) tile)."""
    if reduce_res is None:
        return
    if not isinstance(reduce_res, Tensor):
        raise NkiError("sim_invalid_argument", f"reduce_res of '{api}' must be a tile", caller_location())
    axes = tuple(range(1, res.ndim))
    name = c.op_name(reduce_op) if reduce_op is not None else "add"
    fns: dict[str, Any] = {"add": np.sum, "maximum": np.max, "minimum": np.min, "multiply": np.prod}
    fn = fns.get(name)
    if fn is None:
        raise NkiError("sim_invalid_argument", f"reduce_op '{name}' of '{api}' is not a reduction", caller_location())
    red = fn(res, axis=axes).reshape(res.shape[0], 1)
    cmd = int(getattr(reduce_cmd, "value", reduce_cmd) or 0)
    if cmd in (_REDUCE, _LOAD_REDUCE):
        prev = c.fp32(reduce_res).reshape(res.shape[0], 1)
        red = {"add": np.add, "maximum": np.maximum, "minimum": np.minimum, "multiply": np.multiply}[name](prev, red)
    write_into(reduce_res, red.reshape(reduce_res.shape))


def tensor_tensor_values(data1: Any, data2: Any, op: Any) -> np.ndarray:
    api = "tensor_tensor"
    for n, t in (("data1", data1), ("data2", data2)):
        if not isinstance(t, Tensor):
            raise NkiError("sim_invalid_argument", f"'{n}' of tensor_tensor must be a tile", caller_location())
        c.require_on_chip(api, n, t)
    c.check_same_partitions(api, (("data1", data1), ("data2", data2)))
    c.check_not_both_psum(api, data1, data2)
    a, b = values_of(data1), values_of(data2)
    gen = runtime.require(api).generation
    if gen == runtime.CLASSIC and a.shape != b.shape and a.shape[0] == b.shape[0] and (
            b.size == b.shape[0] or a.size == a.shape[0]):
        # classic tensor_tensor broadcasts a (P, 1) operand along the free dims (used by SDK reference kernels)
        shape = a.shape if a.size >= b.size else b.shape
        a = np.broadcast_to(a.reshape(a.shape[0], *([1] * (len(shape) - 1))) if a.size == a.shape[0] else a, shape)
        b = np.broadcast_to(b.reshape(b.shape[0], *([1] * (len(shape) - 1))) if b.size == b.shape[0] else b, shape)
    if a.size != b.size:
        raise NkiError("sim_shape_mismatch",
                       f"tensor_tensor operands must have the same number of elements per partition: "
                       f"{describe(data1)} vs {describe(data2)} (use tensor_scalar to broadcast a (P, 1) vector)",
                       caller_location(), c.where(data1) + c.where(data2))
    b = b.reshape(a.shape)
    name = c.op_name(op)
    if name in ("bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"):
        return c.apply_alu(api, op, a, b)
    return c.apply_alu(api, op, dtypes.to_fp32(a), dtypes.to_fp32(b))


def tensor_scalar_values(data: Any, op0: Any, operand0: Any, reverse0: bool = False, op1: Any = None,
                         operand1: Any = None, reverse1: bool = False) -> np.ndarray:
    api = "tensor_scalar"
    if not isinstance(data, Tensor):
        raise NkiError("sim_invalid_argument", "tensor_scalar data must be a tile", caller_location())
    c.require_on_chip(api, "data", data)
    x = c.fp32(data)
    p = x.shape[0]
    o0 = _bcast_col(_vector_operand(api, "operand0", operand0, p), x.ndim)
    res = _scalar_step(api, op0, x, o0, reverse0)
    if op1 is not None:
        o1 = _bcast_col(_vector_operand(api, "operand1", operand1, p), x.ndim)
        res = _scalar_step(api, op1, res, o1, reverse1)
    return res


def _scalar_step(api: str, op: Any, x: np.ndarray, operand: Any, reverse: bool) -> np.ndarray:
    name = c.op_name(op)
    if name in UNARY:
        return c.apply_alu(api, op, x)
    if operand is None:
        raise NkiError("sim_invalid_argument", f"operator '{name}' of '{api}' needs an operand", caller_location())
    res = c.apply_alu(api, op, operand, x) if reverse else c.apply_alu(api, op, x, operand)
    return np.broadcast_to(res, x.shape) if np.shape(res) != x.shape else res


def tensor_reduce_values(op: Any, data: Any, axis: Any, negate: bool = False, keepdims: bool = False) -> np.ndarray:
    from .reduce import normalise_axes

    api = "tensor_reduce"
    if not isinstance(data, Tensor):
        raise NkiError("sim_invalid_argument", "tensor_reduce data must be a tile", caller_location())
    c.require_on_chip(api, "data", data)
    x = c.fp32(data)
    axes = normalise_axes(api, axis, x.ndim)
    if runtime.require(api).generation == runtime.NEW and axes != tuple(range(x.ndim - len(axes), x.ndim)):
        raise NkiError("sim_invalid_argument",
                       f"tensor_reduce axes {list(axes)} of a {x.ndim}-D tile must be the trailing free axes ending at "
                       f"the last dim (e.g. {[x.ndim - 1]} or {list(range(1, x.ndim))})", caller_location())
    name = c.op_name(op)
    fns: dict[str, Any] = {"add": np.sum, "maximum": np.max, "minimum": np.min, "multiply": np.prod,
           "logical_and": lambda a, axis, keepdims: np.all(a != 0, axis=axis, keepdims=keepdims),
           "logical_or": lambda a, axis, keepdims: np.any(a != 0, axis=axis, keepdims=keepdims),
           "abs_max": lambda a, axis, keepdims: np.max(np.abs(a), axis=axis, keepdims=keepdims)}
    fn = fns.get(name)
    if fn is None:
        raise NkiError("sim_invalid_argument", f"'{name}' is not a reducible operator of tensor_reduce", caller_location())
    with np.errstate(all="ignore"):
        res = np.asarray(fn(x, axis=axes, keepdims=keepdims), dtype=np.float32)
    if negate:
        res = -res
    if res.ndim < 2:
        res = res.reshape(x.shape[0], 1)
    return res


def tensor_copy_values(src: Any) -> np.ndarray:
    if not isinstance(src, Tensor):
        raise NkiError("sim_invalid_argument", "tensor_copy src must be a tile", caller_location())
    c.require_on_chip("tensor_copy", "src", src)
    return values_of(src)


def iota_pattern_values(shape: tuple[int, ...], pattern: Any, offset: Any, channel_multiplier: Any) -> np.ndarray:
    """New-API iota / affine_select value: offset + p * channel_multiplier + sum(step_k * idx_k)."""
    p = shape[0]
    pat = [tuple(int(x) for x in pair) for pair in (pattern or [])]
    nums = [n for _, n in pat] or [int(np.prod(shape[1:]))]
    steps = [s for s, _ in pat] or [1]
    grids = np.meshgrid(*[np.arange(n) for n in nums], indexing="ij") if nums else []
    free = np.zeros(nums, dtype=np.int64)
    for s, g in zip(steps, grids):
        free = free + s * g
    part = np.arange(p, dtype=np.int64).reshape((p,) + (1,) * len(nums)) * int(channel_multiplier)
    vals = int(offset) + part + free[None, ...]
    return vals.reshape(p, -1)


def affine_select_classic(pred: Any, on_true_tile: Any, on_false_value: Any) -> np.ndarray:
    if not isinstance(pred, Mask):
        raise NkiError("err_unsupported_expression_in_mask",
                       "affine_select predicate must be an affine comparison of nl.arange expressions",
                       caller_location())
    x = c.fp32(on_true_tile)
    cond = np.broadcast_to(pred.values, x.shape)
    return np.where(cond, x, np.float32(on_false_value))


def bn_stats_values(data: Any) -> np.ndarray:
    """Per partition: (count, mean, count*var) of the even elements, then of the odd elements."""
    s = runtime.require("bn_stats")
    if not isinstance(data, Tensor):
        raise NkiError("sim_invalid_argument", "bn_stats data must be a tile", caller_location())
    c.require_on_chip("bn_stats", "data", data)
    x = c.fp32(data).reshape(data.shape[0], -1)
    if x.shape[1] > s.target.bn_stats_fmax:
        raise NkiError("err_size_of_dimension_exceed_arch_limit",
                       f"bn_stats free size {x.shape[1]} exceeds {s.target.bn_stats_fmax} (tile_size.bn_stats_fmax)",
                       caller_location(), c.where(data))
    out = np.zeros((x.shape[0], 6), dtype=np.float32)
    for k, part in enumerate((x[:, 0::2], x[:, 1::2])):
        n = part.shape[1]
        if n:
            mean = part.mean(axis=1)
            out[:, 3 * k] = n
            out[:, 3 * k + 1] = mean
            out[:, 3 * k + 2] = ((part - mean[:, None]) ** 2).sum(axis=1)
    return out


def bn_aggr_values(data: Any) -> np.ndarray:
    """Combine (count, mean, M2) triples from bn_stats into (mean, variance) per partition."""
    x = c.fp32(data).reshape(data.shape[0], -1)
    if x.shape[1] % 3:
        raise NkiError("sim_invalid_argument", f"bn_aggr input free size {x.shape[1]} must be a multiple of 3",
                       caller_location())
    trip = x.reshape(x.shape[0], -1, 3)
    n, mean, m2 = trip[..., 0], trip[..., 1], trip[..., 2]
    total = n.sum(axis=1)
    safe = np.where(total > 0, total, 1)
    gmean = (n * mean).sum(axis=1) / safe
    var = (m2 + n * (mean - gmean[:, None]) ** 2).sum(axis=1) / safe
    return np.stack([gmean, var], axis=1).astype(np.float32)


def nc_matmul_into(api: str, dst: Tensor, stationary: Any, moving: Any, accumulate: Any, perf_mode: Any = None) -> None:
    """New-API nc_matmul: auto accumulation (None) overwrites on the first write of a group."""
    s = runtime.require(api)
    res = matmul_values(api, stationary, moving, perf_mode=perf_mode)
    check_psum_dst(api, dst, res.shape[1])
    if dst.size != res.size:
        raise NkiError("sim_shape_mismatch", f"nc_matmul result [{res.shape[0]}, {res.shape[1]}] does not match dst "
                       f"{describe(dst)}", caller_location(), c.where(dst))
    res = res.reshape(dst.shape)
    st = storage_of(dst)
    flags = s.psum_open.get(st)
    if flags is None:
        flags = np.zeros(st.array.shape, dtype=bool)
        s.psum_open[st] = flags
    if accumulate is None:
        open_ = np.array(view_of(dst).shadow_get(flags))  # a copy: reading dst below closes the group flags
        cur = dtypes.to_fp32(values_of(dst))  # (closes the group flags; they are set again below)
        vals = np.where(open_, cur + res, res)
        write_into(dst, vals)
    elif accumulate:
        write_into(dst, res, accumulate=True)
    else:
        write_into(dst, res)
    view_of(dst).shadow_set(flags, True)


def transpose_into(api: str, dst: Tensor, data: Any, engine: Any) -> None:
    vals, eng = transpose_values(api, data, engine)
    if eng == "tensor" and dst.buffer.kind != "psum":
        raise NkiError("sim_matmul_psum_placement",
                       f"TensorE nc_transpose writes PSUM, but dst `{dst.name}` lives in {dst.buffer.label}",
                       caller_location(), c.where(dst))
    # the 0.3 docs ask dst.dtype == data.dtype, but public kernels transpose bf16 into fp32 PSUM on hardware;
    # TensorE transposes are matmuls with an identity, which accumulate in fp32, so we accept it
    c.store_into(api, dst, vals)
