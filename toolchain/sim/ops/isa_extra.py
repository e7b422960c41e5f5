"""Less common ``nki.isa`` instructions (scans, predicated copies, shuffles, gathers, DMA transpose ...).

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

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ... import dtypes
from ...errors import NkiError
from ...location import caller_location
from .. import runtime
from ..buffers import sbuf
from ..tensor import Tensor, describe, values_of, view_of, write_into
from . import common as c
from .isa import _vector_operand

_IDLE, _RESET, _REDUCE, _RESET_REDUCE, _LOAD_REDUCE = 0, 1, 2, 3, 4
_FP32_MIN = float(np.finfo(np.float32).min)
_BITVEC = {"bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "invert"}
_IDENTITY = {"add": 0.0, "subtract": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}


# ------------------------------------------------------------------------------------ helpers
def _err(code: str, msg: str, *tiles: Any) -> NkiError:
    return NkiError(code, msg, caller_location(), tuple(r for t in tiles if isinstance(t, Tensor) for r in c.where(t)))


def _tile(api: str, name: str, x: Any, psum: bool = True) -> Tensor:
    """An on-chip tile operand (SBUF, or PSUM when the engine can read it); ``dst`` of the new API comes first."""
    if not isinstance(x, Tensor):
        new = name == "dst" and runtime.require(api).generation == runtime.NEW
        first = " (new NKI API: the destination tile is the first argument)" if new else ""
        raise _err("sim_invalid_argument", f"'{name}' of '{api}' must be a tile{first}, got {type(x).__name__}")
    c.require_on_chip(api, name, x, allow_psum=psum)
    return x


def _free(t: Tensor) -> int:
    return t.size // t.shape[0] if t.ndim else 1


def _flat(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0], -1)


def _same_layout(api: str, *named: tuple[str, Any]) -> None:
    """Same partition count and same number of elements per partition."""
    c.check_same_partitions(api, named)
    tiles = [(n, t) for n, t in named if isinstance(t, Tensor)]
    if len({_free(t) for _, t in tiles}) > 1:
        desc = ", ".join(f"{n}{list(t.shape)}" for n, t in tiles)
        raise _err("sim_shape_mismatch", f"operands of '{api}' must have the same number of elements per partition: "
                   f"{desc}", *[t for _, t in tiles])


def _dtype_in(api: str, name: str, t: Any, allowed: tuple[str, ...], what: str = "") -> None:
    if isinstance(t, Tensor) and dtypes.name(t.dtype) not in allowed:
        raise _err("sim_unsupported_dtype", f"'{name}' of '{api}' must be {what or ' / '.join(allowed)}, got "
                   f"{dtypes.name(t.dtype)}", t)


def _same_dtype(api: str, a: Tensor, b: Tensor, an: str = "dst", bn: str = "src") -> None:
    if dtypes.as_dtype(a.dtype) != dtypes.as_dtype(b.dtype):
        raise _err("sim_unsupported_dtype", f"'{an}' dtype {dtypes.name(a.dtype)} of '{api}' must equal '{bn}' dtype "
                   f"{dtypes.name(b.dtype)} (no casting)", a, b)


def _cmd(reduce_cmd: Any) -> int:
    return int(getattr(reduce_cmd, "value", reduce_cmd) or 0)


def _binary_op(api: str, name: str, op: Any, allowed: set[str] | None = None) -> str:
    from .elementwise import BINARY

    n = c.op_name(op)
    if n not in (allowed if allowed is not None else BINARY):
        raise _err("sim_invalid_argument", f"'{name}' of '{api}' must be "
                   f"{'one of ' + ', '.join(sorted(allowed)) if allowed else 'a binary arithmetic operator'}, got '{n}'")
    return n


def _col(api: str, name: str, v: Any, p: int) -> Any:
    """Scalar or (P, 1) operand; a 1-D (P,) view such as ``t[:, k]`` counts as a column too."""
    if isinstance(v, Tensor) and v.ndim == 1 and v.shape[0] == p:
        c.require_on_chip(api, name, v)
        return c.fp32(v).reshape(p, 1)
    return _vector_operand(api, name, v, p)


def _is_zero(v: Any) -> bool:
    return v is None or (not isinstance(v, Tensor) and float(v) == 0.0)


def _rows_mask(mask: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    """Classic ``mask=`` applied to an input tile, flattened to (P, N) (True = element takes part)."""
    m = c.mask_of(mask)
    return None if m is None else _flat(np.broadcast_to(m, shape))


# ----------------------------------------------------------- Vector Engine accumulator registers
_STATES: dict[int, list[Any]] = {}  # id(simulation) -> [accumulators (P, 1) or None, dropout generator]
_FOLDS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "add": (np.sum, np.add), "subtract": (np.sum, np.subtract), "multiply": (np.prod, np.multiply),
    "maximum": (np.max, np.maximum), "minimum": (np.min, np.minimum)}


def _state(s: runtime.Simulation) -> list[Any]:
    st = _STATES.get(id(s))
    if st is None:
        st = _STATES[id(s)] = [None, np.random.default_rng(0)]
        weakref.finalize(s, _STATES.pop, id(s), None)
    return st


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


# --------------------------------------------------------------------------- nc_stream_shuffle
def _start_partition(t: Tensor) -> int | None:
    v = view_of(t)
    if v.coords is not None:
        return int(np.min(v.coords[0])) if v.coords[0].size else 0
    base = v.storage.array
    if v.par_axis != 0 or not base.ndim or not base.strides[0]:
        return None
    off = v.arr.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return off // base.strides[0]


def stream_shuffle_into(api: str, src: Any, dst: Any, shuffle_mask: Any, mask: Any = None) -> None:
    """nc_stream_shuffle (sdk 2.26/2.32): dst[q*32+i] = src[q*32+mask[i]] per 32-partition quadrant; 255 = keep."""
    s, d = _tile(api, "src", src), _tile(api, "dst", dst)
    _same_dtype(api, d, s)
    if _free(s) != _free(d):
        raise _err("sim_shape_mismatch", f"src {describe(s)} and dst {describe(d)} of '{api}' must have the same "
                   "number of elements per partition", s, d)
    sm = [int(v) for v in shuffle_mask]
    if len(sm) != 32 or any(not (0 <= v < 32 or v == 255) for v in sm):
        raise _err("sim_invalid_argument", f"shuffle_mask of '{api}' must be 32 ints in [0, 32) or 255, got {sm}")
    active = -(-max(s.shape[0], d.shape[0]) // 32) * 32
    starts = {32: (0, 32, 64, 96), 64: (0, 64)}.get(active, (0,))
    for n, t in (("src", s), ("dst", d)):
        sp = _start_partition(t)
        if sp is not None and sp not in starts:
            raise _err("sim_invalid_argument", f"{n} of '{api}' starts at partition {sp}; with {active} active "
                       f"partitions it must start at {' / '.join(map(str, starts))}", t)
    x = _flat(np.array(values_of(s)))
    out = _flat(np.array(values_of(d)))
    for q in range(active // 32):
        for i, v in enumerate(sm):
            pd, ps = q * 32 + i, q * 32 + v
            if v == 255 or pd >= out.shape[0]:
                continue
            if ps >= x.shape[0]:
                raise _err("sim_invalid_argument", f"shuffle_mask[{i}] = {v} of '{api}' reads partition {ps} but src "
                           f"{describe(s)} has {x.shape[0]}", s)
            out[pd] = x[ps]
    write_into(d, out.reshape(d.shape), c.mask_of(mask))


def c_nc_stream_shuffle(src: Any, dst: Any, shuffle_mask: Any, *, dtype: Any = None, mask: Any = None,
                        **kw: Any) -> None:
    c.sim("nc_stream_shuffle")
    stream_shuffle_into("nc_stream_shuffle", src, dst, shuffle_mask, mask)


def n_nc_stream_shuffle(dst: Any, src: Any, shuffle_mask: Any, name: Any = None) -> None:
    c.sim("nc_stream_shuffle")
    stream_shuffle_into("nc_stream_shuffle", src, _tile("nc_stream_shuffle", "dst", dst), shuffle_mask)


# ------------------------------------------------------------------------------ local_gather
def local_gather_values(src_buffer: Any, index: Any, num_elem_per_idx: Any = 1,
                        num_valid_indices: Any = None) -> np.ndarray:
    """local_gather (sdk 2.26/2.32, GpSimd): per 16-partition core, indices flattened partition-first (order='F')
    are element offsets into each partition's flattened free dims; ``num_elem_per_idx`` contiguous elements each."""
    api = "local_gather"
    src, idx = _tile(api, "src_buffer", src_buffer, psum=False), _tile(api, "index", index, psum=False)
    c.check_same_partitions(api, (("src_buffer", src), ("index", idx)))
    p = src.shape[0]
    if p % 16:
        raise _err("sim_invalid_argument", f"partition size {p} of '{api}' must be a multiple of 16", src)
    _dtype_in(api, "index", idx, ("uint16",))
    k = int(num_elem_per_idx)
    if k not in (1, 2, 4, 8, 16, 32):
        raise _err("sim_invalid_argument", f"num_elem_per_idx of '{api}' must be 1, 2, 4, 8, 16 or 32, got {k}")
    per_core = 16 * _free(idx)
    nvalid = per_core if num_valid_indices is None else int(num_valid_indices)
    if not 0 < nvalid <= per_core:
        raise _err("sim_invalid_argument", f"num_valid_indices {nvalid} of '{api}' must be in [1, {per_core}] "
                   "(the indices held by 16 partitions of index)", idx)
    if nvalid > 4096:
        raise _err("err_size_of_dimension_exceed_arch_limit", f"'{api}' gathers {nvalid} indices per GpSimd core; "
                   "the limit is 4096", idx)
    data, ind = _flat(values_of(src)), _flat(c.values(idx)).astype(np.int64)
    n = data.shape[1]
    out = np.empty((p, nvalid * k), dtype=data.dtype)
    for core in range(p // 16):
        rows = slice(core * 16, core * 16 + 16)
        i1d = ind[rows].flatten(order="F")[:nvalid]
        if i1d.size and (i1d.min() < 0 or i1d.max() + k > n):
            raise _err("sim_invalid_argument", f"'{api}' index {int(i1d.max())} (+{k} elements) is out of range for "
                       f"{n} elements per partition of {describe(src)}", idx)
        cols = (i1d[:, None] + np.arange(k)[None, :]).reshape(-1)
        out[rows] = data[rows][:, cols]
    return out


def c_local_gather(src_buffer: Any, index: Any, num_elem_per_idx: Any = 1, num_valid_indices: Any = None, *,
                   mask: Any = None, **kw: Any) -> Tensor:
    c.sim("local_gather")
    res = local_gather_values(src_buffer, index, num_elem_per_idx, num_valid_indices)
    return c.emit(res, src_buffer.dtype, c.mask_of(mask), fresh=True)


def n_local_gather(dst: Any, src_buffer: Any, index: Any, num_elem_per_idx: Any = 1, num_valid_indices: Any = None,
                   name: Any = None) -> None:
    c.sim("local_gather")
    d = _tile("local_gather", "dst", dst, False)
    res = local_gather_values(src_buffer, index, num_elem_per_idx, num_valid_indices)
    _same_dtype("local_gather", d, src_buffer, "dst", "src_buffer")
    c.store_into("local_gather", d, res)


# -------------------------------------------------------------------------------- nc_n_gather
def n_nc_n_gather(dst: Any, data: Any, indices: Any, name: Any = None) -> None:
    """nc_n_gather (sdk 2.32, new only, GpSimd): dst[p, j] = flat(data)[p, indices[p, j]], all in SBUF."""
    api = "nc_n_gather"
    c.sim(api)
    d, x, ix = _tile(api, "dst", dst, False), _tile(api, "data", data, psum=False), _tile(api, "indices", indices, False)
    c.check_same_partitions(api, (("dst", d), ("data", x), ("indices", ix)))
    _same_dtype(api, d, x, "dst", "data")
    _dtype_in(api, "indices", ix, ("uint32",))
    if _free(d) != _free(ix):
        raise _err("sim_shape_mismatch", f"dst {describe(d)} of '{api}' must have as many elements per partition as "
                   f"indices {describe(ix)}", d, ix)
    vals, ind = _flat(values_of(x)), _flat(c.values(ix)).astype(np.int64)
    if ind.size and (ind.min() < 0 or ind.max() >= vals.shape[1]):
        raise _err("sim_invalid_argument", f"'{api}' index {int(ind.max())} is outside [0, {vals.shape[1]}) of "
                   f"{describe(x)}", ix)
    c.store_into(api, d, np.take_along_axis(vals, ind, axis=1))


# -------------------------------------------------------------------------------------- dropout
def dropout_values(data: Any, prob: Any) -> np.ndarray:
    """dropout (sdk 2.26/2.32): zero each element with probability ``prob`` (scalar or (P, 1)); no rescaling."""
    api = "dropout"
    s = runtime.require(api)
    x = _tile(api, "data", data)
    if isinstance(prob, Tensor):
        c.check_same_partitions(api, (("data", x), ("prob", prob)))
        if dtypes.is_int(x.dtype):
            _dtype_in(api, "prob", prob, ("float32",), "float32 for integer data")
        elif not dtypes.is_float(prob.dtype):
            raise _err("sim_unsupported_dtype", f"prob of '{api}' must be a float tile", prob)
    pr = _vector_operand(api, "prob", prob, x.shape[0])
    if np.any((pr < 0) | (pr > 1)):
        raise _err("sim_invalid_argument", f"drop probability of '{api}' must be in [0, 1]")
    v = _flat(c.fp32(x))
    keep = _state(s)[1].random(v.shape, dtype=np.float32) >= np.broadcast_to(pr, (v.shape[0], 1))
    return np.where(keep, v, np.float32(0)).reshape(x.shape)


def c_dropout(data: Any, prob: Any, *, mask: Any = None, dtype: Any = None, **kw: Any) -> Tensor:
    c.sim("dropout")
    res = dropout_values(data, prob)
    out_dt = dtype if dtype is not None else data.dtype
    if dtypes.is_int(data.dtype) and dtypes.as_dtype(out_dt) != data.dtype:
        raise _err("sim_unsupported_dtype", "dropout of integer data must keep the input dtype", data)
    return c.emit(res, out_dt, c.mask_of(mask), fresh=True)


def n_dropout(dst: Any, data: Any, prob: Any, name: Any = None) -> None:
    c.sim("dropout")
    d = _tile("dropout", "dst", dst)
    res = dropout_values(data, prob)
    _same_dtype("dropout", d, data, "dst", "data")
    c.store_into("dropout", d, res)


# -------------------------------------------------------------------------------- dma_transpose
_PERMS = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def dma_transpose_values(src: Any, axes: Any, dge_mode: Any = None) -> np.ndarray:
    """dma_transpose (sdk 2.26/2.32, §3.4): 2-D (1,0), 3-D (2,1,0), 4-D (3,1,2,0); src HBM or SBUF, dst SBUF."""
    api = "dma_transpose"
    s = runtime.require(api)
    if not isinstance(src, Tensor):
        raise _err("sim_invalid_argument", f"src of '{api}' must be a tensor")
    if src.buffer.kind == "psum":
        raise _err("err_unsupported_memory", f"Expected operand 'src' of '{api}' to be in address space 'hbm|sbuf', "
                   "but got a tile in 'psum' instead.", src)
    perm = _PERMS.get(src.ndim)
    if perm is None:
        raise _err("sim_invalid_argument", f"'{api}' supports 2-D, 3-D and 4-D src, got {describe(src)}", src)
    if axes is not None and tuple(int(a) for a in axes) != perm:
        raise _err("sim_invalid_argument", f"axes {tuple(axes)} of '{api}' are not supported for a {src.ndim}-D src; "
                   f"use {perm}", src)
    if int(getattr(dge_mode, "value", dge_mode) or 0) == 2 and s.generation == runtime.NEW:  # hwdge
        sh = src.shape
        ok0 = sh[0] == 16 if src.ndim == 2 else sh[0] in (1, 2, 4, 8, 16) and (sh[0] * sh[-2]) % 16 == 0
        if s.target.nc_version < 3 or src.itemsize != 2 or sh[-1] > 128 or not ok0:
            raise _err("sim_invalid_argument", f"hardware-DGE '{api}' needs NeuronCore-v3+, a 2-byte dtype, "
                       "src.shape[-1] <= 128 and src.shape[0] == 16 (2-D) or in {1, 2, 4, 8, 16} with "
                       f"(shape[0] * shape[-2]) % 16 == 0; got {describe(src)} {dtypes.name(src.dtype)}", src)
    res = np.transpose(values_of(src), perm)
    if res.shape[0] > s.target.pmax:
        raise _err("err_num_partition_exceed_arch_limit", f"'{api}' result partition dim {res.shape[0]} (src.shape[-1]) "
                   f"exceeds {s.target.pmax}", src)
    return res


def c_dma_transpose(src: Any, *, axes: Any = None, mask: Any = None, dtype: Any = None, **kw: Any) -> Tensor:
    c.sim("dma_transpose")
    res = dma_transpose_values(src, axes, kw.get("dge_mode"))
    out_dt = dtypes.as_dtype(dtype) if dtype is not None else src.dtype
    if out_dt != res.dtype:
        res = dtypes.cast(dtypes.to_fp32(res), out_dt)
    return c.emit(np.array(res), out_dt, c.mask_of(mask), buffer=sbuf, fresh=True)


def n_dma_transpose(dst: Any, src: Any, axes: Any = None, priority: Any = None, dge_mode: Any = None,
                    oob_mode: Any = None, name: Any = None) -> None:
    api = "dma_transpose"
    c.sim(api)
    d = _tile(api, "dst", dst, False)
    res = dma_transpose_values(src, axes, dge_mode)
    _same_dtype(api, d, src)
    if tuple(d.shape) != res.shape:
        raise _err("sim_shape_mismatch", f"dst {describe(d)} of '{api}' must have the transposed shape "
                   f"{list(res.shape)} (same rank as src)", d)
    c.store_into(api, d, res)


# ------------------------------------------------------------- max8 / find_index8 / match_replace8
def _n_range(api: str, name: str, t: Tensor, lo: int, hi: int = 16384) -> None:
    if not lo <= _free(t) <= hi:
        raise _err("err_size_of_dimension_exceed_arch_limit", f"'{api}' reads {_free(t)} elements per partition of "
                   f"'{name}' {describe(t)}; it must be between {lo} and {hi}", t)


def _vals8(api: str, data: Tensor, vals: Any) -> np.ndarray:
    v = _tile(api, "vals", vals)
    c.check_same_partitions(api, (("data", data), ("vals", v)))
    if _free(v) != 8:
        raise _err("sim_shape_mismatch", f"vals {describe(v)} of '{api}' must hold exactly 8 elements per partition",
                   v)
    return _flat(c.fp32(v))


def max8_values(src: Any, mask: Any = None) -> np.ndarray:
    """max8 (sdk 2.26/2.32): the 8 largest values per partition, descending; 8 <= N <= 16384."""
    t = _tile("max8", "src", src)
    _n_range("max8", "src", t, 8)
    x = _flat(c.fp32(t))
    m = _rows_mask(mask, t.shape)
    if m is not None:
        x = np.where(m, x, -np.inf)
    return -np.sort(-x, axis=1)[:, :8]


def c_max8(*, src: Any, mask: Any = None, dtype: Any = None, **kw: Any) -> Tensor:
    c.sim("max8")
    return c.emit(max8_values(src, mask), dtype if dtype is not None else src.dtype, fresh=True)


def n_max8(dst: Any, src: Any, name: Any = None) -> None:
    c.sim("max8")
    d = _tile("max8", "dst", dst)
    res = max8_values(src)
    if d.shape[0] != res.shape[0] or _free(d) != 8:
        raise _err("sim_shape_mismatch", f"dst {describe(d)} of 'max8' must be [{res.shape[0]}, 8]", d)
    c.store_into("max8", d, res)


def find_index8_values(data: Any, vals: Any, out_dt: Any, mask: Any = None) -> np.ndarray:
    """nc_find_index8 (sdk 2.26/2.32): first index of each of 8 vals per partition; duplicated vals take the
    next occurrence; not found -> all-ones sentinel (sdk 2.32 simulator)."""
    api = "nc_find_index8"
    t = _tile(api, "data", data)
    _n_range(api, "data", t, 8)
    if dtypes.name(out_dt) not in ("uint16", "uint32"):
        raise _err("sim_unsupported_dtype", f"'{api}' writes uint16 or uint32 indices, not {dtypes.name(out_dt)}")
    x, v = _flat(c.fp32(t)), _vals8(api, t, vals)
    valid = _rows_mask(mask, t.shape)
    out = np.full(v.shape, np.iinfo(dtypes.as_dtype(out_dt)).max, dtype=np.int64)
    for j in range(8):
        eq = x == v[:, j:j + 1]
        if valid is not None:
            eq &= valid
        rank = (v[:, :j] == v[:, j:j + 1]).sum(axis=1, keepdims=True)  # earlier duplicates claim earlier matches
        hit = eq & (np.cumsum(eq, axis=1) == rank + 1)
        found = hit.any(axis=1)
        out[found, j] = hit[found].argmax(axis=1)
    return out


def c_nc_find_index8(*, data: Any, vals: Any, mask: Any = None, dtype: Any = None, **kw: Any) -> Tensor:
    c.sim("nc_find_index8")
    out_dt = dtypes.as_dtype(dtype) if dtype is not None else dtypes.uint32
    return c.emit(find_index8_values(data, vals, out_dt, mask), out_dt, fresh=True)


def n_nc_find_index8(dst: Any, data: Any, vals: Any, name: Any = None) -> None:
    c.sim("nc_find_index8")
    d = _tile("nc_find_index8", "dst", dst)
    c.store_into("nc_find_index8", d, find_index8_values(data, vals, d.dtype))


def match_replace8_values(data: Any, vals: Any, imm: Any, dst_idx: Any, reverse: bool, unmatched: int,
                          mask: Any = None) -> np.ndarray:
    """nc_match_replace8: replace the first occurrence of each val with ``imm``. Classic (sdk 2.26 NumPy) walks vals
    0..7 and leaves 0 for unmatched indices; new (sdk 2.32) walks 7..0 (duplicates fill dst_idx descending)."""
    api = "nc_match_replace8"
    t = _tile(api, "data", data)
    _n_range(api, "data", t, 1)
    x, v = _flat(np.array(c.fp32(t))), _vals8(api, t, vals)
    valid = _rows_mask(mask, t.shape)
    idx = np.full(v.shape, unmatched, dtype=np.int64)
    rows = np.arange(x.shape[0])
    for j in (range(7, -1, -1) if reverse else range(8)):
        eq = x == v[:, j:j + 1]
        if valid is not None:
            eq &= valid
        found = eq.any(axis=1)
        first = eq.argmax(axis=1)
        idx[found, j] = first[found]
        x[rows[found], first[found]] = np.float32(imm)
    if dst_idx is not None:
        di = _tile(api, "dst_idx", dst_idx)
        if di.shape[0] != x.shape[0] or _free(di) != 8:
            raise _err("sim_shape_mismatch", f"dst_idx {describe(di)} of '{api}' must hold 8 indices per partition",
                       di)
        write_into(di, idx.reshape(di.shape))
    return x.reshape(t.shape)


def c_nc_match_replace8(*, data: Any, vals: Any, imm: Any, dst_idx: Any = None, mask: Any = None, dtype: Any = None,
                        **kw: Any) -> Tensor:
    c.sim("nc_match_replace8")
    res = match_replace8_values(data, vals, imm, dst_idx, False, 0, mask)
    return c.emit(res, dtype if dtype is not None else data.dtype, c.mask_of(mask), fresh=True)


def n_nc_match_replace8(dst: Any, data: Any, vals: Any, imm: Any, dst_idx: Any = None, name: Any = None) -> None:
    c.sim("nc_match_replace8")
    d = _tile("nc_match_replace8", "dst", dst)
    sentinel = int(np.iinfo(dst_idx.dtype).max) if isinstance(dst_idx, Tensor) and dtypes.is_int(dst_idx.dtype) else 0
    c.store_into("nc_match_replace8", d, match_replace8_values(data, vals, imm, dst_idx, True, sentinel))


# --------------------------------------------------------------------- tensor_partition_reduce
def partition_reduce_values(op: Any, data: Any) -> np.ndarray:
    """tensor_partition_reduce (sdk 2.26/2.32, GpSimd, SBUF only): reduce across partitions -> (1, ...)."""
    api = "tensor_partition_reduce"
    t = _tile(api, "data", data, psum=False)
    n = c.op_name(op)
    if n in ("bitwise_or", "bitwise_and"):
        if not dtypes.is_int(t.dtype):
            raise _err("sim_unsupported_dtype", f"'{n}' of '{api}' needs integer data, got {dtypes.name(t.dtype)}", t)
        return (np.bitwise_or if n == "bitwise_or" else np.bitwise_and).reduce(values_of(t), axis=0, keepdims=True)
    fns: dict[str, Callable[..., Any]] = {"add": np.sum, "maximum": np.max, "average": np.mean, "minimum": np.min}
    if n not in fns or (n == "average" and runtime.require(api).generation == runtime.CLASSIC):
        raise _err("sim_invalid_argument", f"op '{n}' of '{api}' must be add, max, bitwise_or or bitwise_and"
                   f"{' or average' if runtime.require(api).generation == runtime.NEW else ''}")
    with np.errstate(all="ignore"):
        return np.asarray(fns[n](c.fp32(t), axis=0, keepdims=True), dtype=np.float32)


def c_tensor_partition_reduce(op: Any, data: Any, *, mask: Any = None, dtype: Any = None, **kw: Any) -> Tensor:
    c.sim("tensor_partition_reduce")
    res = partition_reduce_values(op, data)
    return c.emit(res, dtype if dtype is not None else data.dtype, c.mask_of(mask), fresh=True)


def n_tensor_partition_reduce(dst: Any, op: Any, data: Any, name: Any = None) -> None:
    c.sim("tensor_partition_reduce")
    d = _tile("tensor_partition_reduce", "dst", dst, False)
    c.store_into("tensor_partition_reduce", d, partition_reduce_values(op, data))


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
    "tensor_copy_predicated": c_tensor_copy_predicated, "nc_stream_shuffle": c_nc_stream_shuffle,
    "local_gather": c_local_gather, "dropout": c_dropout, "dma_transpose": c_dma_transpose, "max8": c_max8,
    "nc_find_index8": c_nc_find_index8, "nc_match_replace8": c_nc_match_replace8,
    "tensor_partition_reduce": c_tensor_partition_reduce, "tensor_scalar_reduce": c_tensor_scalar_reduce,
}
NEW: dict[str, Callable[..., Any]] = {
    "tensor_tensor_scan": n_tensor_tensor_scan, "tensor_scalar_cumulative": n_tensor_scalar_cumulative,
    "select_reduce": n_select_reduce, "range_select": n_range_select,
    "tensor_copy_predicated": n_tensor_copy_predicated, "nc_stream_shuffle": n_nc_stream_shuffle,
    "local_gather": n_local_gather, "dropout": n_dropout, "dma_transpose": n_dma_transpose, "max8": n_max8,
    "nc_find_index8": n_nc_find_index8, "nc_match_replace8": n_nc_match_replace8,
    "tensor_partition_reduce": n_tensor_partition_reduce, "tensor_scalar_reduce": n_tensor_scalar_reduce,
    "nc_n_gather": n_nc_n_gather, "exponential": n_exponential,
}
