"""The traced NKI program: what the kernel's process emits and the clean executor runs.

A kernel is traced in its own jailed process on placeholder inputs that carry shapes and dtypes but
no values (``record.py``); every NKI call it makes — ``nl.*``, ``nisa.*``, a tensor's indexing,
operators and view methods — becomes one event of a ``Program``: the API's name, its arguments as
plain data (tensors as ids, ``nl.arange`` / ``mgrid`` index arrays and masks by value, dtypes, buffers,
enums, operators by name), the source location, and the ids of the tensors it returned. Loops
(``affine_range`` ...) are events too (their creation, each step, their end), so the executor rebuilds
the same loop frames; when the kernel drops its last handle of a tensor, a ``drop`` event lets the
executor free it at the same point. ``replay.py`` executes a program on real inputs in a process that
loads no user code, validating every event with the simulator's own checks.

This module is the one place that knows the format: the value codec (``encode`` / ``decode``), the
event kinds, the caps, and ``parse`` (bytes from an untrusted process → ``Program``, or
``ProgramError``). Nothing in a program is executed as code: names resolve only in the executor's own
table of NKI callables.
"""

from __future__ import annotations

import base64
import enum
import json
import math
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from nki_agent.toolchain.facts import dtypes
from nki_agent.toolchain.facts.errors import SourceLocation

VERSION = 1
MAX_PROGRAM_BYTES = 512 << 20  # the serialized program (JSON, compressed on the wire)
MAX_EVENTS = 4_000_000
MAX_ARRAY_BYTES = 64 << 20  # one index array / mask / host constant, decompressed
MAX_DEPTH = 24  # nesting of one argument (tuples of slices of ...)

ISA_MODULE = __name__.rsplit(".", 1)[0] + ".isa_api"  # where NKI's enums (nisa.engine ...) live

# event kinds (the first element of each event list)
CALL, NEXT, CLOSE, DROP = 0, 1, 2, 3


class ProgramError(ValueError):
    """A program that cannot be decoded or does not replay: malformed, forged or over a cap."""


@dataclass
class Input:
    """One input tensor of the launch: its tensor id, which array it is, and how the kernel declared it."""

    tensor: int
    index: int  # position in the arrays the launch was given (inputs, then model parameters)
    immutable: bool
    name: str


@dataclass
class Instance:
    """One SPMD instance: its program ids, its events and what it returned (encoded)."""

    pid: tuple[int, ...]
    events: list[list[Any]] = field(default_factory=list)
    result: Any = None


@dataclass
class Program:
    """A traced launch: everything the executor needs besides the inputs' values."""

    kernel_name: str
    kernel_file: str
    def_line: int
    generation: str
    target: str
    grid: tuple[int, ...]
    inputs: list[Input]
    instances: list[Instance]
    fns: list[str]  # API names the CALL events index
    locs: list[SourceLocation | None]  # source locations the CALL events index
    n_inputs: int  # arrays the launch was given (inputs, then model parameters)
    problems: list[dict[str, Any]] = field(default_factory=list)  # trace-time warnings (display only)

    def to_json(self) -> dict[str, Any]:
        return {"version": VERSION, "kernel_name": self.kernel_name, "kernel_file": self.kernel_file,
                "def_line": self.def_line, "generation": self.generation, "target": self.target,
                "grid": list(self.grid), "n_inputs": self.n_inputs,
                "inputs": [[i.tensor, i.index, i.immutable, i.name] for i in self.inputs],
                "instances": [[list(i.pid), i.events, i.result] for i in self.instances],
                "fns": self.fns, "locs": [None if loc is None else _loc_json(loc) for loc in self.locs],
                "problems": self.problems}


def _loc_json(loc: SourceLocation) -> list[Any]:
    return [loc.path, loc.line, loc.column, loc.end_line, loc.end_column]


def pack(program: Program) -> np.ndarray:
    """The program as one compressed byte array (a wire frame carries it without the header's cap)."""
    raw = json.dumps(program.to_json(), separators=(",", ":"), allow_nan=False).encode()
    if len(raw) > MAX_PROGRAM_BYTES:
        raise ProgramError(f"the traced program is {len(raw) >> 20} MiB (limit {MAX_PROGRAM_BYTES >> 20} MiB)")
    return np.frombuffer(zlib.compress(raw, 1), dtype=np.uint8)


def unpack(blob: Any) -> Program:
    """Bytes an untrusted process sent → a checked ``Program`` (``ProgramError`` when anything is off)."""
    if not isinstance(blob, np.ndarray) or blob.dtype != np.uint8 or blob.ndim != 1:
        raise ProgramError("the traced program is not a byte array")
    raw = _inflate(blob.tobytes(), MAX_PROGRAM_BYTES)
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise ProgramError(f"the traced program is not JSON ({type(e).__name__})") from None
    return parse(data)


def _inflate(data: bytes, cap: int) -> bytes:
    d = zlib.decompressobj()
    try:
        out = d.decompress(data, cap + 1)
    except zlib.error as e:
        raise ProgramError(f"corrupt compressed data ({e})") from None
    if len(out) > cap or d.unconsumed_tail:
        raise ProgramError(f"compressed data expands beyond {cap >> 20} MiB")
    return out


def parse(data: Any) -> Program:
    """Check the program's structure (types, sizes, references are checked again while replaying)."""
    try:
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ProgramError("unknown program version")
        inputs = [Input(_i(t), _i(k), bool(m), _s(n)) for t, k, m, n in (_l(x) for x in _l(data["inputs"]))]
        instances = []
        total = 0
        for pid, events, result in _l(data["instances"]):
            evs = _l(events)
            total += len(evs)
            if total > MAX_EVENTS:
                raise ProgramError(f"more than {MAX_EVENTS} events")
            instances.append(Instance(tuple(_i(x) for x in _l(pid)), evs, result))
        locs: list[SourceLocation | None] = []
        for loc in _l(data["locs"]):
            if loc is None:
                locs.append(None)
                continue
            path, line, col, end_line, end_col = _l(loc)
            locs.append(SourceLocation(_s(path), _i(line), _i(col), None if end_line is None else _i(end_line),
                                       None if end_col is None else _i(end_col)))
        problems = [p for p in _l(data.get("problems", []))[:200] if isinstance(p, dict)]
        return Program(_s(data["kernel_name"]), _s(data["kernel_file"]), _i(data["def_line"]),
                       _s(data["generation"]), _s(data["target"]), tuple(_i(g) for g in _l(data["grid"])),
                       inputs, instances, [_s(f) for f in _l(data["fns"])], locs, _i(data["n_inputs"]), problems)
    except ProgramError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise ProgramError(f"malformed program ({type(e).__name__}: {e})") from None


def _l(x: Any) -> list[Any]:
    if not isinstance(x, list):
        raise ProgramError("expected a list")
    return x


def _s(x: Any) -> str:
    if not isinstance(x, str):
        raise ProgramError("expected a string")
    return x


def _i(x: Any) -> int:
    if not isinstance(x, int) or isinstance(x, bool):
        raise ProgramError("expected an integer")
    return x


# -- values ----------------------------------------------------------------------------------------------

class Unencodable(TypeError):
    """An argument the program format cannot carry (the kernel passed something that is not NKI data)."""


def encode(v: Any, tensor_id: Callable[[Any], int], fn_name: Callable[[Any], str | None],
           depth: int = 0) -> Any:
    """One argument as plain JSON data. ``tensor_id`` names a tensor handle; ``fn_name`` an NKI callable."""
    from nki_agent.toolchain.sim.buffers import Buffer
    from nki_agent.toolchain.sim.index import Index, Mask
    from nki_agent.toolchain.sim.storage import ParDim
    from nki_agent.toolchain.sim.tensor import Tensor

    if depth > MAX_DEPTH:
        raise Unencodable("argument nested too deeply")
    if v is None or isinstance(v, str) or type(v) is bool:
        return v
    if isinstance(v, Tensor):
        return {"t": tensor_id(v)}
    if isinstance(v, ParDim):
        return {"pd": int(v)}
    if isinstance(v, enum.Enum) and type(v).__module__ == ISA_MODULE:
        return {"en": [type(v).__name__, v.name]}
    if type(v) is int:
        return v
    if type(v) is float:
        return v if math.isfinite(v) else {"f": repr(v)}
    if isinstance(v, Index):
        return {"ix": encode_array(v.values)}
    if isinstance(v, Mask):
        return {"mk": encode_array(v.values)}
    if isinstance(v, slice):
        return {"sl": [encode(x, tensor_id, fn_name, depth + 1) for x in (v.start, v.stop, v.step)]}
    if v is Ellipsis:
        return {"el": 1}
    if isinstance(v, np.dtype):
        return {"dt": _dtype_key(v)}
    if isinstance(v, type) and issubclass(v, np.generic):
        return {"dty": _dtype_key(np.dtype(v))}
    if isinstance(v, np.generic):
        return {"ns": [_dtype_key(v.dtype), encode(v.item(), tensor_id, fn_name, depth + 1)]} \
            if v.dtype.kind in "biuf" else {"nd": encode_array(np.asarray(v))}
    if isinstance(v, np.ndarray):
        return {"nd": encode_array(v)}
    if isinstance(v, Buffer):
        return {"bf": [v.kind, v.shared, v.label, encode(v.params, tensor_id, fn_name, depth + 1)]}
    if isinstance(v, tuple):
        return {"tu": [encode(x, tensor_id, fn_name, depth + 1) for x in v]}
    if isinstance(v, list):
        return {"li": [encode(x, tensor_id, fn_name, depth + 1) for x in v]}
    if isinstance(v, dict) and all(isinstance(k, str) for k in v):
        return {"di": [[k, encode(x, tensor_id, fn_name, depth + 1)] for k, x in v.items()]}
    if isinstance(v, (int, float)):  # subclasses the kernel made: their plain value
        return int(v) if isinstance(v, int) else encode(float(v), tensor_id, fn_name, depth)
    name = fn_name(v) if callable(v) else None
    if name is not None:
        return {"fn": name}
    raise Unencodable(f"an argument of type {type(v).__module__}.{type(v).__qualname__} is not NKI data")


def _dtype_key(dt: np.dtype[Any]) -> str:
    for k, v in dtypes.ALL.items():
        if v is dt:
            return k
    return dtypes.name(dt)


def encode_array(a: np.ndarray) -> Any:
    """An index array / mask / constant: as base + strides when it is an affine grid, else compressed bytes."""
    a = np.asarray(a)
    if a.dtype.kind in "iu" and a.size >= 4:
        aff = _affine(a)
        if aff is not None:
            return {"af": [dtypes.name(a.dtype), list(a.shape), aff[0], aff[1]]}
    if a.dtype.kind not in "biuf" and a.dtype not in (dtypes.bfloat16,):
        raise Unencodable(f"an array of dtype {a.dtype} is not NKI data")
    if a.nbytes > MAX_ARRAY_BYTES:
        raise Unencodable(f"an array of {a.nbytes} bytes is too large to pass to an NKI call")
    raw = zlib.compress(np.ascontiguousarray(a).tobytes(), 1)
    return {"ar": [dtypes.name(a.dtype), list(a.shape), base64.b64encode(raw).decode()]}


def _affine(a: np.ndarray) -> tuple[int, list[int]] | None:
    """(base, per-axis strides) when ``a[i...] == base + sum(stride_k * i_k)``."""
    if a.size == 0:
        return None
    base = int(a.reshape(-1)[0])
    strides = []
    for ax, n in enumerate(a.shape):
        if n <= 1:
            strides.append(0)
            continue
        idx = [0] * a.ndim
        idx[ax] = 1
        strides.append(int(a[tuple(idx)]) - base)
    if _grid(a.shape, base, strides, a.dtype).tobytes() != np.ascontiguousarray(a).tobytes():
        return None
    return base, strides


def _grid(shape: Any, base: int, strides: list[int], dt: Any) -> np.ndarray:
    out = np.full(tuple(shape), base, dtype=np.int64)
    for ax, (n, s) in enumerate(zip(shape, strides)):
        if s and n > 1:
            view = [1] * len(shape)
            view[ax] = n
            out = out + (np.arange(n, dtype=np.int64) * s).reshape(view)
    return out.astype(dt)


def decode_array(x: Any) -> np.ndarray:
    if not isinstance(x, dict) or len(x) != 1:
        raise ProgramError("malformed array")
    (kind, body), = x.items()
    name, shape = _s(body[0]), [_i(d) for d in _l(body[1])]
    from nki_agent.toolchain.protocol.wire import plain_dtype

    try:
        dt = plain_dtype(name)
    except ValueError as e:
        raise ProgramError(str(e)) from None
    if len(shape) > 8 or any(d < 0 for d in shape):
        raise ProgramError("malformed array shape")
    n = math.prod(shape)
    if n * dt.itemsize > MAX_ARRAY_BYTES:
        raise ProgramError("an array in the program is too large")
    if kind == "af":
        strides = [_i(s) for s in _l(body[3])]
        if len(strides) != len(shape):
            raise ProgramError("malformed affine array")
        return _grid(shape, _i(body[2]), strides, dt)
    if kind == "ar":
        try:
            raw = _inflate(base64.b64decode(_s(body[2]), validate=True), MAX_ARRAY_BYTES)
        except (ValueError, TypeError):
            raise ProgramError("malformed array bytes") from None
        if len(raw) != n * dt.itemsize:
            raise ProgramError("array bytes do not match their shape")
        return np.frombuffer(raw, dtype=dt).reshape(shape).copy()
    raise ProgramError(f"unknown array kind {kind!r}")


@dataclass
class Names:
    """What names resolve to in the executor: tensors by id, callables and enums by name."""

    tensor: Callable[[int], Any]
    fn: Callable[[str], Any]
    enum: Callable[[str, str], Any]


def decode(x: Any, names: Names, depth: int = 0) -> Any:
    """Plain JSON data → the argument value the executor passes to the simulator (the simulator's classes are
    imported in the branches that build them: every argument of every call of every seed passes here)."""
    if depth > MAX_DEPTH:
        raise ProgramError("argument nested too deeply")
    if x is None or isinstance(x, (str, bool)):
        return x
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        return x
    if not isinstance(x, dict) or len(x) != 1:
        raise ProgramError("malformed argument")
    (kind, body), = x.items()
    d = depth + 1
    if kind == "t":
        return names.tensor(_i(body))
    if kind == "tu":
        return tuple(decode(v, names, d) for v in _l(body))
    if kind == "li":
        return [decode(v, names, d) for v in _l(body)]
    if kind == "di":
        return {_s(k): decode(v, names, d) for k, v in (_l(p) for p in _l(body))}
    if kind == "sl":
        a, b, c = _l(body)
        return slice(decode(a, names, d), decode(b, names, d), decode(c, names, d))
    if kind == "ix":
        from nki_agent.toolchain.sim.index import Index

        return Index(decode_array(body))
    if kind == "mk":
        from nki_agent.toolchain.sim.index import Mask

        return Mask(decode_array(body).astype(bool))
    if kind == "el":
        return Ellipsis
    if kind == "pd":
        from nki_agent.toolchain.sim.storage import ParDim

        return ParDim(_i(body))
    if kind == "en":
        cls, member = _l(body)
        return names.enum(_s(cls), _s(member))
    if kind == "f":
        if body not in ("nan", "inf", "-inf"):
            raise ProgramError("malformed float")
        return float(body)
    if kind in ("dt", "dty"):
        dt = dtypes.ALL.get(_s(body))
        if dt is None:
            try:
                from nki_agent.toolchain.protocol.wire import plain_dtype

                dt = plain_dtype(body)
            except ValueError:
                raise ProgramError(f"unknown dtype {body!r}") from None
        return dt if kind == "dt" else dt.type
    if kind == "ns":
        name, value = _l(body)
        dt = decode({"dt": name}, names, d)
        if not isinstance(value, (int, float, bool)):
            raise ProgramError("malformed scalar")
        return np.asarray(value).astype(dt)[()]
    if kind == "nd":
        return decode_array(body)
    if kind == "bf":
        k, shared, label, params = _l(body)
        if k not in ("hbm", "sbuf", "psum"):
            raise ProgramError(f"unknown buffer {k!r}")
        from nki_agent.toolchain.sim.buffers import Buffer

        return Buffer(k, bool(shared), _s(label), decode(params, names, d))
    if kind == "fn":
        return names.fn(_s(body))
    raise ProgramError(f"unknown argument kind {kind!r}")
