"""The byte stream between the parent and a worker: frames of one JSON header plus raw array bytes.

A frame is ``MAGIC``, an 8-byte little-endian header length, the UTF-8 JSON header and then, for each
entry of the header's ``arrays`` list (``{"dtype", "shape"}`` or ``null``), that many raw bytes in C
order. The parent reads what an untrusted worker wrote with ``decode``: every size is checked against
caps before anything is allocated, a dtype must be a plain numeric NumPy or ml_dtypes type, and the
header must be a JSON object — nothing else in it is believed beyond shape and dtype. Requests go
the other way with ``write`` on the worker's stdin; ``read`` is the worker's blocking reader (the
parent is trusted there, so it skips the schema model of ``wire_schema.py``, whose import costs a
worker ~80 ms of start-up).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:  # NumPy and the dtypes (ml_dtypes) are imported by the first frame, not by importing this
    import numpy as np

MAGIC = b"NKIW1\n"
MAX_HEADER_BYTES = 16 << 20  # problems, traces and settings; far beyond any real header
MAX_DIMS = 8
MAX_ARRAYS = 4096
_LEN = struct.Struct("<Q")


class WireError(ValueError):
    """A frame that is truncated, oversized or malformed."""


def plain_dtype(name: str) -> np.dtype[Any]:
    """The dtype called ``name`` if it is a plain numeric type (no objects, records or strings)."""
    from nki_agent.toolchain.facts import dtypes

    try:
        dt = dtypes.as_dtype(name)
    except (TypeError, ValueError) as e:
        raise ValueError(f"unknown dtype {name!r}") from e
    if dt.kind not in "biufcV" or dt.fields is not None or dt.hasobject or dt.subdtype is not None \
            or not 0 < dt.itemsize <= 16:
        raise ValueError(f"dtype {name!r} is not a tensor dtype")
    return dt


def meta_of(a: np.ndarray) -> dict[str, Any]:
    from nki_agent.toolchain.facts import dtypes

    return {"dtype": dtypes.name(a.dtype), "shape": [int(d) for d in a.shape]}


def encode(header: dict[str, Any], arrays: Sequence[np.ndarray | None] = ()) -> list[bytes | memoryview]:
    """The frame's pieces (header bytes, then each array's buffer) ready to be written in order."""
    import numpy as np

    arrs = [None if a is None else np.ascontiguousarray(a) for a in arrays]
    head = dict(header, arrays=[None if a is None else meta_of(a) for a in arrs])
    raw = json.dumps(head, default=str).encode("utf-8")
    pieces: list[bytes | memoryview] = [MAGIC + _LEN.pack(len(raw)) + raw]
    # as bytes: ml_dtypes types (bfloat16, fp8) have no buffer-protocol format of their own
    pieces += [a.reshape(-1).view(np.uint8).data if a.size else b"" for a in arrs if a is not None]
    return pieces


def write(fd: int, header: dict[str, Any], arrays: Sequence[np.ndarray | None] = ()) -> None:
    """Write one frame to a raw descriptor (the worker's result pipe or the parent's stdin pipe)."""
    for piece in encode(header, arrays):
        view = memoryview(piece).cast("B")
        while view:
            view = view[os.write(fd, view):]


def read(stream: BinaryIO, max_bytes: int) -> tuple[dict[str, Any], list[np.ndarray | None]]:
    """Read one frame from a blocking stream (the worker's stdin): header and arrays."""
    import numpy as np

    prefix = _exactly(stream, len(MAGIC) + _LEN.size)
    header = _header(prefix, lambda n: _exactly(stream, n))
    arrays: list[np.ndarray | None] = []
    for m in _metas(header, max_bytes, trusted=True):
        if m is None:
            arrays.append(None)
            continue
        a = np.empty(m.shape, dtype=plain_dtype(m.dtype))  # read straight into the array: no extra copy
        view, got = a.reshape(-1).view(np.uint8).data, 0
        while got < m.nbytes:
            n = stream.readinto(view[got:])  # type: ignore[attr-defined]
            if not n:
                raise WireError("the stream ended inside a frame")
            got += n
        arrays.append(a)
    return header, arrays


def decode(data: bytes | bytearray | memoryview, max_bytes: int) -> tuple[dict[str, Any], list[np.ndarray | None], int]:
    """Parse one frame at the start of ``data``: (header, arrays, bytes consumed). Raises ``WireError``.

    The arrays are views of ``data`` (no copy): writable when ``data`` is a ``bytearray``."""
    view = memoryview(data)
    pos = len(MAGIC) + _LEN.size
    if len(view) < pos:
        raise WireError("the reply is truncated (no frame header)")

    def take(n: int) -> bytes:
        nonlocal pos
        if len(view) < pos + n:
            raise WireError("the reply is truncated")
        out = bytes(view[pos:pos + n])
        pos += n
        return out

    header = _header(bytes(view[:pos]), take)
    arrays: list[np.ndarray | None] = []
    for m in _metas(header, max_bytes):
        if m is None:
            arrays.append(None)
            continue
        if len(view) < pos + m.nbytes:
            raise WireError("the reply is truncated (array data missing)")
        arrays.append(_array(view[pos:pos + m.nbytes], m, copy=False))
        pos += m.nbytes
    return header, arrays, pos


class Splitter:
    """Cuts a stream of untrusted bytes into frames as they arrive (``feed``), checking each header once."""

    def __init__(self, max_bytes: int) -> None:
        self.buf = bytearray()
        self.max_bytes = max_bytes
        self._need: int | None = None  # size of the frame at the start of buf, once its header is known

    def feed(self, chunk: bytes) -> list[tuple[dict[str, Any], list[np.ndarray | None]]]:
        self.buf += chunk
        out: list[tuple[dict[str, Any], list[np.ndarray | None]]] = []
        while True:
            if self._need is None:
                self._need = self._size()
                if self._need is None:
                    return out
            if len(self.buf) < self._need:
                return out
            frame = self.buf[: self._need]
            del self.buf[: self._need]
            self._need = None
            header, arrays, _ = decode(frame, self.max_bytes)
            out.append((header, arrays))

    def _size(self) -> int | None:
        prefix = len(MAGIC) + _LEN.size
        if len(self.buf) < prefix:
            if self.buf and not MAGIC.startswith(bytes(self.buf[: len(MAGIC)])):
                raise WireError("the reply is not a result frame")
            return None
        (n,) = _LEN.unpack(self.buf[len(MAGIC):prefix])
        if self.buf[: len(MAGIC)] != MAGIC or n > MAX_HEADER_BYTES:
            raise WireError("the reply is not a result frame" if self.buf[: len(MAGIC)] != MAGIC else
                            f"the reply header is {n} bytes (limit {MAX_HEADER_BYTES})")
        if len(self.buf) < prefix + n:
            return None
        header = _header(bytes(self.buf[:prefix]), lambda k: bytes(self.buf[prefix:prefix + k]))
        return prefix + n + sum(m.nbytes for m in _metas(header, self.max_bytes) if m is not None)


def _header(prefix: bytes, take: Any) -> dict[str, Any]:
    if prefix[: len(MAGIC)] != MAGIC:
        raise WireError("the reply is not a result frame")
    (n,) = _LEN.unpack(prefix[len(MAGIC):])
    if n > MAX_HEADER_BYTES:
        raise WireError(f"the reply header is {n} bytes (limit {MAX_HEADER_BYTES})")
    try:
        header = json.loads(take(n))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WireError(f"the reply header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise WireError("the reply header is not an object")
    return header


def _metas(header: dict[str, Any], max_bytes: int, trusted: bool = False) -> list[Any]:
    raw = header.get("arrays", [])
    if not isinstance(raw, list) or len(raw) > MAX_ARRAYS:
        raise WireError("the reply's array list is malformed")
    if trusted:
        metas: list[Any] = [None if m is None else _Trusted(str(m["dtype"]), tuple(m["shape"])) for m in raw]
        return metas
    from nki_agent.toolchain.protocol.wire_schema import ArrayMeta

    try:
        metas = [None if m is None else ArrayMeta.model_validate(m) for m in raw]
    except ValueError as e:
        raise WireError(f"the reply describes an invalid array: {str(e).splitlines()[0][:200]}") from None
    total = sum(m.nbytes for m in metas if m is not None)
    if total > max_bytes:
        raise WireError(f"the reply holds {total} bytes of arrays (limit {max_bytes})")
    return metas


class _Trusted:
    """Shape and dtype of an array the parent sent (no schema check needed)."""

    __slots__ = ("dtype", "shape")

    def __init__(self, dtype: str, shape: tuple[int, ...]) -> None:
        self.dtype, self.shape = dtype, shape

    @property
    def nbytes(self) -> int:
        return nbytes(self.dtype, self.shape)


def nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    n = plain_dtype(dtype).itemsize
    for d in shape:
        n *= d
    return n


def _array(buf: bytes | memoryview, m: Any, copy: bool = True) -> np.ndarray:
    import numpy as np

    a = np.frombuffer(buf, dtype=plain_dtype(m.dtype)).reshape(m.shape)
    return a.copy() if copy else a


def _exactly(stream: BinaryIO, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            raise WireError("the stream ended inside a frame")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
