"""Less common ``nki.isa`` data-movement and selection instructions: stream shuffles, local / n-gathers,
dropout, DMA transpose, the 8-wide max / find-index / match-replace family and partition reductions.

Same conventions as ``isa_extra`` (a shared ``*_values`` function, ``c_*`` classic and ``n_*`` new
wrappers; semantics from the ``nki/api/nki/isa/__init__.py`` docstrings of aws-neuron-sdk, classic: sdk
2.26 @ 1db4d74e, new: sdk 2.32 @ 81ce03ae); ``CLASSIC`` / ``NEW`` are merged by ``isa_extra``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nki_agent.toolchain.facts import dtypes
from .. import runtime
from ..buffers import sbuf
from ..tensor import Tensor, describe, values_of, view_of, write_into
from . import common as c
from .isa import _vector_operand
from .isa_checks import _dtype_in, _err, _flat, _free, _rows_mask, _same_dtype, _state, _tile


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
    # A probability is runtime data (a prob tile) the engine compares a uniform draw in [0, 1) against: one
    # >= 1 drops every element, as 1.0 does, one <= 0 keeps every element (docs/toolchain.md, "dropout").
    pr = _vector_operand(api, "prob", prob, x.shape[0])
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


CLASSIC: dict[str, Callable[..., Any]] = {
    "nc_stream_shuffle": c_nc_stream_shuffle,
    "local_gather": c_local_gather,
    "dropout": c_dropout,
    "dma_transpose": c_dma_transpose,
    "max8": c_max8,
    "nc_find_index8": c_nc_find_index8,
    "nc_match_replace8": c_nc_match_replace8,
    "tensor_partition_reduce": c_tensor_partition_reduce,
}
NEW: dict[str, Callable[..., Any]] = {
    "nc_stream_shuffle": n_nc_stream_shuffle,
    "local_gather": n_local_gather,
    "dropout": n_dropout,
    "dma_transpose": n_dma_transpose,
    "max8": n_max8,
    "nc_find_index8": n_nc_find_index8,
    "nc_match_replace8": n_nc_match_replace8,
    "tensor_partition_reduce": n_tensor_partition_reduce,
    "nc_n_gather": n_nc_n_gather,
}
