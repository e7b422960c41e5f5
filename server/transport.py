"""The JSON-RPC read loop, hardened: framing, size caps, malformed frames, and one answer per request.

Framing (``Framer``): bytes in, frame bodies out, never stuck on a bad frame. A frame is header
lines (``Content-Length`` required, other ``token: value`` lines ignored, CRLF or LF) and a blank
line, then the body. Anything else -- garbage between frames, a header line over 8 KB, a bad
(non-numeric, negative, over 20 digits) or conflicting ``Content-Length``, a missing blank line --
drops the frame with ONE log line and resynchronises on the next ``Content-Length: N`` line. That
line, with its raw newline right after the digits, can never occur inside a JSON body, so it also
proves a body cut short: a declared length that runs into the next header (too long, or an absurd
10^12) ends the frame there instead of swallowing what follows, and a body that is not JSON (too
short a length) is searched for the next header. Bodies over the size cap (64 MB) are streamed past,
never stored.

Dispatch: every frame is first parsed as plain JSON (pygls' own loop reads any ``Content-Length``
it is given, and a request whose params do not match the LSP types gets *no* response plus a
``showMessage`` popup); a request (``id`` + ``method``) that cannot be structured, is too large, was
cut short by bad framing, arrives after ``shutdown`` or has an invalid shape is answered with the
JSON-RPC error it deserves (-32602, -32600). Frames without an id are logged and dropped.

pygls is used through its public API only: ``set_writer``, ``structure_message`` and ``handle_message``. The
transport owns the writer, so the errors it answers itself are frames it writes (``Channel.error``), and it
sees the ``shutdown`` request go by (``Channel.shut_down``); pygls has no public call for either.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import re
import sys
import threading
from collections.abc import Callable
from typing import Any, BinaryIO, Protocol

from lsprotocol import types as T
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInternalError,
    JsonRpcInvalidParams,
    JsonRpcInvalidRequest,
)
from pygls.protocol import JsonRPCProtocol

log = logging.getLogger(__name__)

# a 5 MB document is ~ 12 MB of JSON after escaping; beyond 64 MB is abuse (env override for tests)
MAX_MESSAGE_BYTES = int(os.environ.get("NKI_AGENT_MAX_MESSAGE_BYTES", str(64 * 1024 * 1024)))
MAX_HEADER_LINE = 8192
MAX_HEADER_BLOCK = 64 * 1024
_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')
_CHUNK = 1 << 20
_HEAD = 4096  # bytes of an oversize body kept to find its request id
# A Content-Length line as it can never occur inside a JSON body (a raw newline right after the digits).
_FRAME_START = re.compile(rb"content-length[ \t]{0,32}:[ \t]{0,32}\d{1,20}[ \t]{0,32}\r?\n", re.IGNORECASE)
_OVERLAP = 136  # longer than any _FRAME_START match
_DIGIT_OR_BLANK = frozenset(b"0123456789 \t")
_CL_LINE = re.compile(rb"content-length[ \t]*:(.*)\Z", re.IGNORECASE | re.DOTALL)
_OTHER_HEADER = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+[ \t]*:[^\x00-\x08\x0a-\x1f\x7f]*\Z")


class AsyncReader(Protocol):
    async def read_some(self, n: int) -> bytes:
        """Up to ``n`` bytes, as soon as any are available; ``b""`` at EOF."""
        ...


def _settle(fut: asyncio.Future[bytes], value: bytes | None, exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value or b"")


class StdinReader:
    """Blocking stdin reads in one daemon thread (a blocked read must not keep the process alive at exit)."""

    def __init__(self, stdin: BinaryIO) -> None:
        self.stdin = stdin
        self.jobs: queue.SimpleQueue[tuple[Any, int, asyncio.AbstractEventLoop, asyncio.Future[bytes]]] = \
            queue.SimpleQueue()
        threading.Thread(target=self._run, name="nki-stdin", daemon=True).start()

    def _run(self) -> None:
        while True:
            fn, n, loop, fut = self.jobs.get()
            try:
                data = fn(n)
            except BaseException as exc:  # noqa: BLE001 - handed to the loop
                loop.call_soon_threadsafe(_settle, fut, None, exc)
                continue
            loop.call_soon_threadsafe(_settle, fut, data, None)

    def _submit(self, fn: Any, n: int) -> asyncio.Future[bytes]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bytes] = loop.create_future()
        self.jobs.put((fn, n, loop, fut))
        return fut

    async def read_some(self, n: int) -> bytes:
        return await self._submit(getattr(self.stdin, "read1", self.stdin.read), n)


class StreamReader:
    """An asyncio stream (TCP) as an ``AsyncReader``."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader

    async def read_some(self, n: int) -> bytes:
        return await self.reader.read(n)


class SafeWriter:
    """stdout writer that goes quiet once the client side is closed (late publishes after ``exit``)."""

    def __init__(self, stream: BinaryIO, stop: threading.Event) -> None:
        self.stream = stream
        self.stop = stop
        self.closed = False
        self.lock = threading.Lock()

    def close(self) -> None:
        with self.lock:
            self.closed = True
            try:
                self.stream.close()
            except (OSError, ValueError):
                pass

    def write(self, data: bytes) -> None:
        with self.lock:
            if self.closed:
                return
            try:
                self.stream.write(data)
                self.stream.flush()
            except (OSError, ValueError):  # broken pipe: the client is gone
                self.closed = True
                self.stop.set()


MAX_ERROR_CHARS = 300  # an error reply's message, at most


def one_line_error(error: T.ResponseError) -> T.ResponseError:
    """``error`` as the client sees it: one line of its message (capped), and no traceback in ``data``."""
    lines = [ln.strip() for ln in str(error.message or "").splitlines() if ln.strip()]
    text = lines[-1] if lines and lines[0].startswith("Traceback") else (lines[0] if lines else "")
    if len(text) > MAX_ERROR_CHARS:
        text = text[:MAX_ERROR_CHARS - 1] + "…"
    if not text and error.code == JsonRpcInternalError.CODE:
        text = "internal error (see the NKI Agent log)"
    data = error.data
    if isinstance(data, dict):
        data = {k: v for k, v in data.items() if k != "traceback"} or None
    if data is not None and "Traceback" in str(data):
        data = None
    return T.ResponseError(code=error.code, message=text, data=data)


class Writer(Protocol):
    def write(self, data: bytes) -> Any: ...

    def close(self) -> Any: ...


class Channel:
    """One client connection: pygls' protocol (handles every message that is valid), the writer both write to,
    and what the transport itself must know (the ``shutdown`` request went by)."""

    def __init__(self, protocol: JsonRPCProtocol, writer: Writer) -> None:
        self.protocol = protocol
        self.writer = writer
        self.shut_down = False
        protocol.set_writer(writer)

    def error(self, msg_id: Any, exc: JsonRpcException) -> None:
        """Answer request ``msg_id`` with ``exc`` (``one_line_error``: one line, no traceback)."""
        err = one_line_error(exc.to_response_error())
        payload: dict[str, Any] = {"code": err.code, "message": err.message}
        if err.data is not None:
            payload["data"] = err.data
        body = json.dumps({"jsonrpc": "2.0", "id": msg_id, "error": payload}, default=str).encode()
        self.writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)


def _error(channel: Channel, msg_id: Any, exc: JsonRpcException) -> None:
    channel.error(msg_id, exc)


def _valid_id(v: Any) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or isinstance(v, str)


def dispatch(channel: Channel, body: bytes) -> bool:
    """Handle one frame body; never raises. False: the body is not JSON (the framing may be off)."""
    try:
        raw = json.loads(body)
    except (ValueError, RecursionError) as exc:
        log.warning("dropped a frame that is not JSON: %s", exc)
        return False
    _handle(channel, raw, body)
    return True


def _handle(channel: Channel, raw: Any, body: bytes) -> None:
    protocol = channel.protocol
    if not isinstance(raw, dict):
        log.warning("dropped a frame that is not a JSON object (%s)", type(raw).__name__)
        return
    msg_id = raw.get("id")
    method = raw.get("method")
    is_request = "id" in raw and "method" in raw
    if is_request and not _valid_id(msg_id):
        log.warning("dropped a request with an invalid id %r", msg_id)
        return
    if raw.get("jsonrpc") != "2.0" or ("method" in raw and not isinstance(method, str)):
        if is_request:
            _error(channel, msg_id, JsonRpcInvalidRequest("not a JSON-RPC 2.0 request"))
        else:
            log.warning("dropped an invalid frame")
        return
    if is_request and channel.shut_down and method != "exit":
        _error(channel, msg_id, JsonRpcInvalidRequest("server is shutting down"))
        return
    try:
        message = json.loads(body, object_hook=protocol.structure_message)
    except JsonRpcException as exc:
        if is_request:
            _error(channel, msg_id, exc)
        else:
            log.warning("dropped an invalid %s notification: %s", method, exc)
        return
    except Exception as exc:  # noqa: BLE001 - cattrs may raise anything on hostile input
        if is_request:
            _error(channel, msg_id, JsonRpcInvalidParams(str(exc)[:200]))
        else:
            log.warning("dropped an invalid %s notification: %s", method, exc)
        return
    if is_request and not hasattr(message, "id"):  # a notification method sent with an id
        _error(channel, msg_id, JsonRpcInvalidRequest(f"{method} is a notification, not a request"))
        return
    try:
        protocol.handle_message(message)
    except Exception as exc:  # pygls answers handler errors itself; this is the last line of defence
        log.exception("failed to handle %s", method)
        if is_request:
            _error(channel, msg_id, JsonRpcInternalError(str(exc)[:200]))
    if is_request and method == "shutdown":
        channel.shut_down = True  # what follows is refused, ``exit`` aside


def _answer_cut(channel: Channel, prefix: bytes, reason: str) -> None:
    """A request whose frame was cut short by bad framing still gets its one answer (an error)."""
    try:
        raw = json.loads(prefix)
    except (ValueError, RecursionError):
        return
    if isinstance(raw, dict) and isinstance(raw.get("method"), str) and _valid_id(raw.get("id")):
        _error(channel, raw["id"], JsonRpcInvalidRequest(f"frame dropped: {reason}"))


class Framer:
    """Bytes in, frame bodies out (``feed`` as data arrives, ``close`` at EOF); never raises on input.

    Modes: ``headers`` (line by line), ``body`` (a body within the size cap, kept until complete),
    ``skip`` (an oversize body, streamed past: only its first bytes are kept) and ``resync`` (after a
    bad frame: bytes are skipped up to the next ``_FRAME_START``). Offsets are positions in the stream;
    ``buf`` holds the stream from ``base`` on, and only what a mode still needs is kept.
    """

    def __init__(self, on_frame: Callable[[bytes], bool], on_cut: Callable[[bytes, str], None],
                 on_oversize: Callable[[bytes], None], max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self.on_frame, self.on_cut, self.on_oversize, self.max_bytes = on_frame, on_cut, on_oversize, max_bytes
        self.buf = bytearray()
        self.base = 0  # stream offset of buf[0]
        self.pos = 0  # headers: the next line; body/skip: the body's first byte
        self.mode = "headers"
        self.length: int | None = None  # Content-Length of the current header block
        self.headers = 0  # other header lines in the current block
        self.block = 0  # bytes in the current header block
        self.end = 0  # body/skip: where the body ends
        self.head = b""  # skip: the body's first bytes
        self.floor = 0  # body/skip/resync: a frame start found must begin here or later
        self.scanned = 0  # body/skip/resync: every newline before this was checked
        self.reason: str | None = None  # resync: what was dropped (None: already logged)
        self.origin = 0  # resync: where the dropped bytes begin

    # -- input ---------------------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        self.buf += data
        while self._step():
            pass
        keep = self.pos if self.mode in ("headers", "body") else max(self.floor, self.scanned - _OVERLAP)
        if self.mode == "skip" and len(self.head) < min(_HEAD, self.end - self.floor):
            keep = self.floor  # the request id is still being read
        if keep > self.base:
            del self.buf[:keep - self.base]
            self.base = keep

    def close(self) -> None:
        """End of input: report a frame left open."""
        if self.mode == "resync" and self.reason:
            log.warning("dropped %s; skipped %d bytes up to the end of input", self.reason,
                        self.base + len(self.buf) - self.origin)
        elif self.mode in ("body", "skip"):
            log.warning("input ended inside a frame (%d of %d bytes)", self.base + len(self.buf) - self.floor,
                        self.end - self.floor)

    # -- the modes -------------------------------------------------------------------------------
    def _step(self) -> bool:
        if self.mode == "headers":
            return self._header_line()
        if self.mode == "resync":
            return self._resync_step()
        return self._body_step()

    def _header_line(self) -> bool:
        i = self.pos - self.base
        nl = self.buf.find(b"\n", i, i + MAX_HEADER_LINE)
        if nl < 0:
            if len(self.buf) - i >= MAX_HEADER_LINE:
                self._resync(self.pos, f"a frame with a header line over {MAX_HEADER_LINE} bytes")
                return True
            return False
        start, line = self.pos, bytes(self.buf[i:nl + 1]).strip()
        self.pos = self.base + nl + 1
        self.block += nl + 1 - i
        if self.block > MAX_HEADER_BLOCK:
            self._resync(start, f"a frame with a header block over {MAX_HEADER_BLOCK} bytes")
        elif not line:
            if self.length is not None:
                self._begin_body(self.length)
            elif self.headers:
                self._resync(self.pos, "a header block without Content-Length", 0)
            else:
                self.block = 0  # a blank line between frames
        elif m := _CL_LINE.match(line):
            value = m.group(1).strip()
            if not value.isdigit() or len(value) > 20:
                self._resync(start, f"a frame with a bad Content-Length {value[:40].decode('latin-1')!r}")
            elif self.length is not None and self.length != int(value):
                self._resync(start, f"a frame with conflicting Content-Length headers ({self.length}, {int(value)})")
            else:
                self.length = int(value)
        elif _OTHER_HEADER.match(line):
            self.headers += 1
        elif self.length is not None or self.headers:
            self._resync(start, "a frame whose header block has a line that is not a header (no blank line?)")
        else:
            self._resync(start, "bytes between frames that are not a header")
        return True

    def _begin_body(self, n: int) -> None:
        self.mode = "body" if n <= self.max_bytes else "skip"
        self.floor = self.scanned = self.pos
        self.end = self.pos + n
        self.head = b""

    def _next_headers(self, at: int) -> None:
        self.mode, self.pos = "headers", at
        self.length, self.headers, self.block = None, 0, 0

    def _resync(self, origin: int, reason: str | None, skip: int = 1) -> None:
        """Drop from ``origin`` on, up to the next frame start after ``origin + skip``."""
        self.mode, self.reason, self.origin = "resync", reason, origin
        self.floor = self.scanned = origin + skip
        self.length, self.headers, self.block = None, 0, 0

    def _find_frame_start(self) -> int | None:
        """The first ``_FRAME_START`` at or after ``floor`` whose newline is past ``scanned``; advances ``scanned``."""
        buf, base = self.buf, self.base
        nl = buf.find(b"\n", self.scanned - base)
        while nl >= 0:
            k = nl - 1 if nl > 0 and buf[nl - 1] == 13 else nl  # 13: CR
            if k > 0 and buf[k - 1] in _DIGIT_OR_BLANK:  # else no Content-Length line ends here
                m = _FRAME_START.search(buf, max(self.floor - base, nl + 1 - _OVERLAP, 0), nl + 1)
                if m:
                    self.scanned = base + nl + 1
                    return base + m.start()
            nl = buf.find(b"\n", nl + 1)
        self.scanned = base + len(buf)
        return None

    def _resync_step(self) -> bool:
        at = self._find_frame_start()
        if at is None:
            return False
        if self.reason:
            log.warning("dropped %s; skipped %d bytes to the next header", self.reason, at - self.origin)
        else:
            log.debug("skipped %d bytes to the next header", at - self.origin)
        self._next_headers(at)
        return True

    def _body_step(self) -> bool:
        avail = self.base + len(self.buf)
        start, n = self.floor, self.end - self.floor
        if self.mode == "skip" and len(self.head) < _HEAD and start >= self.base:
            self.head = bytes(self.buf[start - self.base:min(self.end, start + _HEAD) - self.base])
        if self.mode == "body" and avail >= self.end:  # complete: a body that is not JSON is searched
            body = bytes(self.buf[start - self.base:self.end - self.base])
            self._next_headers(self.end)
            if not self.on_frame(body):
                self._resync(start, None, 0)
            return True
        at = self._find_frame_start()
        if at is not None and at < self.end:
            reason = f"its Content-Length ({n}) runs {at - start} bytes into the next frame's header"
            log.warning("dropped a frame: %s", reason)
            self.on_cut(self.head[:at - start] if self.mode == "skip" else
                        bytes(self.buf[start - self.base:at - self.base]), reason)
            self._next_headers(at)
            return True
        if self.mode == "skip" and (avail >= self.end or at is not None):
            log.warning("dropped a %d-byte message (limit %d)", n, self.max_bytes)
            self.on_oversize(self.head)
            self._next_headers(self.end)
            return True
        return False


async def read_loop(reader: AsyncReader, channel: Channel, stop: threading.Event,
                    max_bytes: int = MAX_MESSAGE_BYTES) -> None:
    """Read frames until EOF or ``stop``; each is handled by ``dispatch``."""

    def oversize(head: bytes) -> None:
        mid = _ID.search(head)
        if mid and b'"method"' in head:
            _error(channel, json.loads(mid.group(1)), JsonRpcInvalidRequest(f"message larger than {max_bytes} bytes"))

    framer = Framer(lambda body: dispatch(channel, body), lambda prefix, why: _answer_cut(channel, prefix, why),
                    oversize, max_bytes)
    while not stop.is_set():
        data = await reader.read_some(_CHUNK)
        if not data:
            framer.close()
            break
        framer.feed(data)


def start_io(protocol: JsonRPCProtocol, stop: threading.Event, stdin: BinaryIO | None = None,
             stdout: BinaryIO | None = None) -> int:
    """Serve over stdio until EOF or ``exit``; the exit code (0 after a shutdown request)."""
    channel = Channel(protocol, SafeWriter(stdout or sys.stdout.buffer, stop))
    reader = StdinReader(stdin or sys.stdin.buffer)
    try:
        asyncio.run(read_loop(reader, channel, stop))
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 0
    except (BrokenPipeError, KeyboardInterrupt):
        return 1
    return 0 if channel.shut_down else 1


def start_tcp(protocol: JsonRPCProtocol, stop: threading.Event, host: str, port: int) -> None:
    """Serve one client at a time over TCP (for debugging with a client that connects)."""

    class _Writer:
        def __init__(self, w: asyncio.StreamWriter) -> None:
            self.w = w

        def close(self) -> None:
            self.w.close()

        def write(self, data: bytes) -> None:
            self.w.write(data)

    async def conn(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_loop(StreamReader(r), Channel(protocol, _Writer(w)), stop)

    async def main() -> None:
        server = await asyncio.start_server(conn, host, port, limit=MAX_HEADER_LINE * 8)
        log.info("listening on %s:%s", host, port)
        async with server:
            await server.serve_forever()

    try:
        asyncio.run(main())
    except (KeyboardInterrupt, SystemExit):
        pass
