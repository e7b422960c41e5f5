"""Less common ``nki.isa`` instructions: scans, cumulative and select reductions, range selects, predicated
copies, tensor_scalar_reduce, exponential — the users of the Vector Engine accumulator registers.

``CLASSIC`` and ``NEW`` map instruction names to their implementation for each API generation;
``isa_api`` merges them into the ``nki.isa`` namespaces. Each instruction has a shared ``*_values``
function (checks + fp32 NumPy semantics) and two thin wrappers: ``c_*`` returns a new tile (or writes
the in-place ``dst=`` of the classic signature), ``n_*`` writes into ``dst``. Semantics and constraints
follow the ``nki/api/nki/isa/__init__.py`` docstrings of aws-neuron-sdk (classic: sdk 2.26 @ 1db4d74e,
new: sdk 2.32 @ 81ce03ae) and docs/nki-language.md section 3.

The Vector Engine accumulator registers shared by ``select_reduce``, ``range_select``,
``tensor_scalar_reduce``, ``tensor_scalar_cumulative`` and ``exponential`` (``reduce_cmd``) are one
(P, 1) fp32 vector per simulation; ``idle`` leaves them undefined, so a later ``reduce`` is an error.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nki_agent.toolchain.facts import dtypes
from .. import runtime
from ..tensor import Tensor, describe, values_of, write_into
from . import common as c
from . import isa_movement
from .isa import _vector_operand
from .isa_checks import (
    _BITVEC,
    _FP32_MIN,
    _IDENTITY,
    _IDLE,
    _LOAD_REDUCE,
    _REDUCE,
    _RESET,
    _RESET_REDUCE,
    _binary_op,
    _cmd,
    _col,
    _dtype_in,
    _err,
    _flat,
    _free,
    _is_zero,
    _same_dtype,
    _same_layout,
    _state,
    _tile,
)

# ----------------------------------------------------------- Vector Engine accumulator registers
_FOLDS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "add": (np.sum, np.add), "subtract": (np.sum, np.subtract), "multiply": (np.prod, np.multiply),
    "maximum": (np.max, np.maximum), "minimum": (np.min, np.minimum)}


def _fold(op: str, start: np.ndarray, vals: np.ndarray) -> np.ndarray:
    red, comb = _FOLDS[op]
    with np.errstate(all="ignore"):
        return np.asarray(comb(start, red(_flat(vals), axis=1, keepdims=True)), dtype=np.float32)


def _start(api: str, s: runtime.Simulation, cmd: int, op: str, p: int, init: Any) -> np.ndarray:
    """Accumulator value before this instruction's reduction (reset / reduce / load_reduce)."""
    if cmd == _REDUCE:
        acc = _state(s)[0]
        if acc is None or acc.shape[0] != p:
            raise _err("sim_invalid_argument", f"'{api}' uses reduce_cmd.reduce but the Vector Engine accumulators "
                       "hold no value for these partitions (start the chain with reset_reduce or load_reduce)")
        return acc
    if cmd == _LOAD_REDUCE:
        if init is None:
            raise _err("sim_invalid_argument", f"'{api}' with reduce_cmd.load_reduce needs an initial value")
        return np.broadcast_to(np.asarray(init, dtype=np.float32), (p, 1)).copy()
    return np.full((p, 1), _IDENTITY[op], dtype=np.float32)


def _reduce(api: str, s: runtime.Simulation, vals: np.ndarray, op: str, reduce_cmd: Any, reduce_res: Any,
            init: Any = None, negate: bool = False, float_res: bool = False) -> None:
    """Reduce ``vals`` along the free dims into the accumulators and optionally read them out."""
    cmd, p = _cmd(reduce_cmd), vals.shape[0]
    if reduce_res is not None:
        res = _tile(api, "reduce_res", reduce_res)
        if res.shape[0] != p or _free(res) != 1:
            raise _err("sim_shape_mismatch", f"reduce_res of '{api}' must have shape ({p}, 1), got {describe(res)}",
                       res)
        if float_res and not dtypes.is_float(res.dtype):
            raise _err("sim_unsupported_dtype", f"reduce_res of '{api}' must be a float tile, got "
                       f"{dtypes.name(res.dtype)}", res)
    if cmd == _IDLE:
        _state(s)[0] = None  # "accumulator state unknown" after an idle instruction
        acc = _fold(op, _start(api, s, _RESET_REDUCE, op, p, None), vals)
    elif cmd == _RESET:
        acc = _state(s)[0] = _start(api, s, _RESET, op, p, None)
    else:
        acc = _state(s)[0] = _fold(op, _start(api, s, cmd, op, p, init), vals)
    if reduce_res is not None:
        write_into(reduce_res, (-acc if negate else acc).reshape(reduce_res.shape))


# --------------------------------------------------------------------------- tensor_tensor_scan
def tensor_tensor_scan_values(data0: Any, data1: Any, initial: Any, op0: Any, op1: Any, reverse0: bool = False,
                              reverse1: bool = False) -> np.ndarray:
    """tensor_tensor_scan (sdk 2.26/2.32): r[i] = op1(op0(data0[i], r[i-1]), data1[i]) per partition, fp32."""
    api = "tensor_tensor_scan"
    a, b = _tile(api, "data0", data0), _tile(api, "data1", data1)
    _same_layout(api, ("data0", a), ("data1", b))
    c.check_not_both_psum(api, a, b)
    f0, f1 = c.ALU[_binary_op(api, "op0", op0)], c.ALU[_binary_op(api, "op1", op1)]
    x0, x1 = _flat(c.fp32(a)), _flat(c.fp32(b))
    prev = np.broadcast_to(_col(api, "initial", initial, a.shape[0]), (a.shape[0], 1))[:, 0]
    out = np.empty_like(x0)
    with np.errstate(all="ignore"):
        for i in range(x0.shape[1]):
            t = f0(prev, x0[:, i]) if reverse0 else f0(x0[:, i], prev)
            prev = out[:, i] = f1(x1[:, i], t) if reverse1 else f1(t, x1[:, i])
    return out.reshape(a.shape)


def c_tensor_tensor_scan(data0: Any, data1: Any, initial: Any, op0: Any, op1: Any, reverse0: bool = False,
                         reverse1: bool = False, *, dtype: Any = None, mask: Any = None, **kw: Any) -> Tensor:
    c.sim("tensor_tensor_scan")
    res = tensor_tensor_scan_values(data0, data1, initial, op0, op1, reverse0, reverse1)
    return c.emit(res, c.result_dtype(dtype, data0, data1), c.mask_of(mask), fresh=True)


def n_tensor_tensor_scan(dst: Any, data0: Any, data1: Any, initial: Any, op0: Any, op1: Any, reverse0: bool = False,
                         reverse1: bool = False, name: Any = None) -> None:
    c.sim("tensor_tensor_scan")
    c.store_into("tensor_tensor_scan", _tile("tensor_tensor_scan", "dst", dst),
                 tensor_tensor_scan_values(data0, data1, initial, op0, op1, reverse0, reverse1))


# ---------------------------------------------------------------------- tensor_scalar_cumulative
def n_tensor_scalar_cumulative(dst: Any, src: Any, op0: Any, op1: Any, imm0: Any, imm1: Any = None,
                               reduce_cmd: Any = _RESET_REDUCE, name: Any = None) -> None:
    """tensor_scalar_cumulative (sdk 2.32, new only): reg = op1(op0(src[i], imm0), reg); dst[i] = reg."""
    api = "tensor_scalar_cumulative"
    s = c.sim(api)
    d, x = _tile(api, "dst", dst), _tile(api, "src", src)
    _same_layout(api, ("dst", d), ("src", x))
    for n, t in (("src", x), ("dst", d)):
        _dtype_in(api, n, t, tuple(k for k in dtypes.ALL if k not in ("int32", "uint32")), "a non-32-bit-int dtype")
    n0 = c.op_name(op0)
    if n0 in _BITVEC:
        raise _err("sim_invalid_argument", f"op0 of '{api}' must be an arithmetic operator, got '{n0}'")
    n1 = _binary_op(api, "op1", op1, set(_IDENTITY))
    p = x.shape[0]
    from .isa import _scalar_step

    y = _flat(_scalar_step(api, op0, _flat(c.fp32(x)), _vector_operand(api, "imm0", imm0, p), False))
    cmd = _cmd(reduce_cmd)
    init = _col(api, "imm1", imm1, p)
    reg = _start(api, s, cmd if cmd in (_REDUCE, _LOAD_REDUCE) else _RESET_REDUCE, n1, p, init)[:, 0]
    out = np.empty_like(y)
    f1 = c.ALU[n1]
    with np.errstate(all="ignore"):
        for i in range(y.shape[1]):
            reg = out[:, i] = f1(y[:, i], reg)
    _state(s)[0] = reg.reshape(p, 1).astype(np.float32)
    c.store_into(api, d, out.reshape(x.shape))


# ----------------------------------------------------------------------------- select_reduce
_PRED_SELECT = ("int8", "uint8", "int16", "uint16", "bool_")
_PRED_COPY = ("uint8", "uint16", "uint32", "bool_")


def _predicate(api: str, pred: Any, allowed: tuple[str, ...], reverse: bool, shape: tuple[int, ...]) -> np.ndarray:
    t = _tile(api, "predicate", pred)
    _dtype_in(api, "predicate", t, allowed)
    m = c.values(t).reshape(shape) != 0
    return ~m if reverse else m


def select_reduce_values(dst: Tensor, predicate: Any, on_true: Any, on_false: Any, reduce_res: Any,
                         reduce_cmd: Any, reduce_op: Any, reverse_pred: bool) -> np.ndarray:
    """select_reduce (sdk 2.26/2.32): where(pred, on_true, on_false) + optional max into the accumulators."""
    api = "select_reduce"
    s = runtime.require(api)
    t = _tile(api, "on_true", on_true)
    _same_layout(api, ("dst", dst), ("predicate", predicate), ("on_true", t))
    c.check_not_both_psum(api, t, predicate)
    if dtypes.name(t.dtype) in ("int32", "uint32"):
        raise _err("sim_unsupported_dtype", f"on_true of '{api}' cannot be {dtypes.name(t.dtype)}", t)
    _binary_op(api, "reduce_op", reduce_op, {"maximum"})
    x = c.fp32(t)
    m = _predicate(api, predicate, _PRED_SELECT, reverse_pred, x.shape)
    p = x.shape[0]
    f = np.broadcast_to(_vector_operand(api, "on_false", on_false, p), (p, 1))
    res = np.where(m, x, f.reshape((p,) + (1,) * (x.ndim - 1))).astype(np.float32)
    _reduce(api, s, res, "maximum", reduce_cmd, reduce_res, float_res=True)
    return res


def c_select_reduce(*, dst: Any, predicate: Any, on_true: Any, on_false: Any, reduce_res: Any = None,
                    reduce_cmd: Any = _IDLE, reduce_op: Any = "maximum", reverse_pred: bool = False, mask: Any = None,
                    dtype: Any = None, **kw: Any) -> None:
    c.sim("select_reduce")
    d = _tile("select_reduce", "dst", dst)
    res = select_reduce_values(d, predicate, on_true, on_false, reduce_res, reduce_cmd, reduce_op, reverse_pred)
    write_into(d, res.reshape(d.shape), c.mask_of(mask))


def n_select_reduce(dst: Any, predicate: Any, on_true: Any, on_false: Any, reduce_res: Any = None,
                    reduce_cmd: Any = _IDLE, reduce_op: Any = "maximum", reverse_pred: bool = False,
                    name: Any = None) -> None:
    c.sim("select_reduce")
    d = _tile("select_reduce", "dst", dst)
    c.store_into("select_reduce", d, select_reduce_values(d, predicate, on_true, on_false, reduce_res, reduce_cmd,
                                                          reduce_op, reverse_pred))


# ------------------------------------------------------------------------------ range_select
_COMPARE = {"equal", "less", "less_equal", "greater", "greater_equal"}


def range_select_values(on_true_tile: Any, comp_op0: Any, comp_op1: Any, bound0: Any, bound1: Any, reduce_cmd: Any,
                        reduce_res: Any, reduce_op: Any, range_start: Any, on_false_value: Any) -> np.ndarray:
    """range_select (sdk 2.26/2.32, NeuronCore-v3+): keep x[i] where both comp_op(i + range_start, bound) hold."""
    api = "range_select"
    s = runtime.require(api)
    if s.target.nc_version < 3:
        raise _err("sim_invalid_argument", f"'{api}' is only available on NeuronCore-v3+ (trn2/trn3), not "
                   f"{s.target.name}")
    t = _tile(api, "on_true_tile", on_true_tile)
    if not dtypes.is_float(t.dtype):
        raise _err("sim_unsupported_dtype", f"on_true_tile of '{api}' must be a float tile, got "
                   f"{dtypes.name(t.dtype)}", t)
    f0, f1 = (c.ALU[_binary_op(api, n, o, _COMPARE)] for n, o in (("comp_op0", comp_op0), ("comp_op1", comp_op1)))
    _binary_op(api, "reduce_op", reduce_op, {"maximum"})
    p = t.shape[0]
    bounds = []
    for n, b in (("bound0", bound0), ("bound1", bound1)):
        if isinstance(b, Tensor):
            c.check_same_partitions(api, (("on_true_tile", t), (n, b)))
            _dtype_in(api, n, b, ("float32",))
        bounds.append(np.broadcast_to(_vector_operand(api, n, b, p), (p, 1)))
    if on_false_value is not None and np.float32(on_false_value) != np.float32(_FP32_MIN):
        raise _err("sim_invalid_argument", f"on_false_value of '{api}' must be FP32_MIN ({_FP32_MIN}), got "
                   f"{on_false_value}")
    x = _flat(c.fp32(t))
    idx = (np.float32(int(range_start)) + np.arange(x.shape[1], dtype=np.float32))[None, :]
    with np.errstate(all="ignore"):
        keep = (f0(idx, bounds[0]) != 0) & (f1(idx, bounds[1]) != 0)
    res = np.where(keep, x, np.float32(_FP32_MIN)).astype(np.float32)
    _reduce(api, s, res, "maximum", reduce_cmd, reduce_res)
    return res.reshape(t.shape)


def c_range_select(*, on_true_tile: Any, comp_op0: Any, comp_op1: Any, bound0: Any, bound1: Any,
                   reduce_cmd: Any = _IDLE, reduce_res: Any = None, reduce_op: Any = "maximum", range_start: Any = 0,
                   on_false_value: Any = _FP32_MIN, mask: Any = None, dtype: Any = None, **kw: Any) -> Tensor:
    c.sim("range_select")
    res = range_select_values(on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd, reduce_res, reduce_op,
                              range_start, on_false_value)
    return c.emit(res, dtype if dtype is not None else on_true_tile.dtype, c.mask_of(mask), fresh=True)


def n_range_select(dst: Any, on_true_tile: Any, comp_op0: Any, comp_op1: Any, bound0: Any, bound1: Any,
                   reduce_cmd: Any = _RESET_REDUCE, reduce_res: Any = None, reduce_op: Any = "maximum",
                   range_start: Any = 0, on_false_value: Any = _FP32_MIN, name: Any = None) -> None:
    c.sim("range_select")
    d = _tile("range_select", "dst", dst)
    c.store_into("range_select", d, range_select_values(on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd,
                                                        reduce_res, reduce_op, range_start, on_false_value))


# -------------------------------------------------------------------- tensor_copy_predicated
def copy_predicated_values(dst: Tensor, src: Any, predicate: Any, reverse_pred: bool) -> np.ndarray:
    """tensor_copy_predicated (sdk 2.26/2.32): dst = where(pred, src, dst); src a tile or a scalar."""
    api = "tensor_copy_predicated"
    _same_layout(api, ("dst", dst), ("src", src), ("predicate", predicate))
    cur = values_of(dst)
    if isinstance(src, Tensor):
        _tile(api, "src", src)
        c.check_not_both_psum(api, src, predicate)
        _same_dtype(api, dst, src)
        val: Any = c.values(src).reshape(cur.shape)
    else:
        val = dtypes.cast(np.asarray(src, dtype=np.float32), dst.dtype)
    m = _predicate(api, predicate, _PRED_COPY, reverse_pred, cur.shape)
    return np.where(m, val, cur)


def c_tensor_copy_predicated(*, src: Any, dst: Any, predicate: Any, reverse_pred: bool = False, mask: Any = None,
                             dtype: Any = None, **kw: Any) -> None:
    c.sim("tensor_copy_predicated")
    d = _tile("tensor_copy_predicated", "dst", dst)
    write_into(d, copy_predicated_values(d, src, predicate, reverse_pred), c.mask_of(mask))


def n_tensor_copy_predicated(dst: Any, src: Any, predicate: Any, reverse_pred: bool = False, name: Any = None) -> None:
    c.sim("tensor_copy_predicated")
    d = _tile("tensor_copy_predicated", "dst", dst)
    c.store_into("tensor_copy_predicated", d, copy_predicated_values(d, src, predicate, reverse_pred))


# ------------------------------------------------------------------------ tensor_scalar_reduce
def tensor_scalar_reduce_values(data: Any, op0: Any, operand0: Any, reduce_op: Any, reduce_res: Any,
                                reverse0: bool, reduce_cmd: Any, reduce_init: Any, negate: bool) -> np.ndarray:
    """tensor_scalar_reduce (sdk 2.26/2.32): data <op0> operand0, reduced along free dims into reduce_res."""
    from .isa import tensor_scalar_values

    api = "tensor_scalar_reduce"
    s = runtime.require(api)
    t = _tile(api, "data", data)
    n0 = c.op_name(op0)
    if n0 in _BITVEC:
        raise _err("sim_invalid_argument", f"op0 of '{api}' must be an arithmetic operator, got bitvec '{n0}'")
    allowed = set(_IDENTITY) - ({"subtract"} if s.generation == runtime.NEW else set())
    rop = _binary_op(api, "reduce_op", reduce_op, allowed)
    res = tensor_scalar_values(t, op0, operand0, reverse0)
    if _cmd(reduce_cmd) != _LOAD_REDUCE and not _is_zero(reduce_init):
        raise _err("sim_invalid_argument", f"reduce_init of '{api}' may only be set with reduce_cmd.load_reduce")
    init = _col(api, "reduce_init", reduce_init, t.shape[0])
    _reduce(api, s, res, rop, reduce_cmd, reduce_res, init, negate)
    return res


def c_tensor_scalar_reduce(*, data: Any, op0: Any, operand0: Any, reduce_op: Any, reduce_res: Any,
                           reverse0: bool = False, dtype: Any = None, mask: Any = None, **kw: Any) -> Tensor:
    c.sim("tensor_scalar_reduce")
    res = tensor_scalar_reduce_values(data, op0, operand0, reduce_op, reduce_res, reverse0, _RESET_REDUCE, None, False)
    return c.emit(res, c.result_dtype(dtype, data), c.mask_of(mask), fresh=True)


def n_tensor_scalar_reduce(dst: Any, data: Any, op0: Any, operand0: Any, reduce_op: Any, reduce_res: Any = None,
                           reverse0: bool = False, reduce_cmd: Any = _RESET_REDUCE, reduce_init: Any = None,
                           reduce_res_negate: bool = False, name: Any = None) -> None:
    c.sim("tensor_scalar_reduce")
    d = _tile("tensor_scalar_reduce", "dst", dst)
    c.store_into("tensor_scalar_reduce", d, tensor_scalar_reduce_values(
        data, op0, operand0, reduce_op, reduce_res, reverse0, reduce_cmd, reduce_init, reduce_res_negate))


# ---------------------------------------------------------------------------------- exponential
def n_exponential(dst: Any, src: Any, max_value: Any = 0.0, reduce_res: Any = None, reduce_cmd: Any = _IDLE,
                  reduce_init: Any = 0.0, name: Any = None) -> None:
    """exponential (sdk 2.32, new only, NeuronCore-v4 VectorE): dst = exp(src - max_value), sum into accumulators."""
    api = "exponential"
    s = c.sim(api)
    d, x = _tile(api, "dst", dst), _tile(api, "src", src)
    _same_layout(api, ("dst", d), ("src", x))
    if x.ndim > 4 or d.ndim > 4:
        raise _err("err_exceed_max_supported_dimension", f"'{api}' supports up to 4-D src/dst, got {describe(x)} -> "
                   f"{describe(d)}", x)
    if _cmd(reduce_cmd) != _LOAD_REDUCE and not _is_zero(reduce_init):
        raise _err("sim_invalid_argument", f"reduce_init of '{api}' must be 0.0 unless reduce_cmd is load_reduce")
    p = x.shape[0]
    mv = _col(api, "max_value", max_value, p)
    v = _flat(c.fp32(x))
    with np.errstate(all="ignore"):
        res = np.exp(v - mv).astype(np.float32)
    _reduce(api, s, res, "add", reduce_cmd, reduce_res, _col(api, "reduce_init", reduce_init, p), float_res=True)
    c.store_into(api, d, res.reshape(x.shape))


CLASSIC: dict[str, Callable[..., Any]] = {
    "tensor_tensor_scan": c_tensor_tensor_scan, "select_reduce": c_select_reduce, "range_select": c_range_select,
    "tensor_copy_predicated": c_tensor_copy_predicated, "tensor_scalar_reduce": c_tensor_scalar_reduce,
    **isa_movement.CLASSIC,
}
NEW: dict[str, Callable[..., Any]] = {
    "tensor_tensor_scan": n_tensor_tensor_scan, "tensor_scalar_cumulative": n_tensor_scalar_cumulative,
    "select_reduce": n_select_reduce, "range_select": n_range_select,
    "tensor_copy_predicated": n_tensor_copy_predicated, "tensor_scalar_reduce": n_tensor_scalar_reduce,
    "exponential": n_exponential, **isa_movement.NEW,
}
