"""The JSON-RPC read loop, hardened: size caps, malformed frames, and one answer per request.

pygls' own loop (``pygls.io_.run_async``) reads any ``Content-Length`` it is given, and a request whose
params do not match the LSP types gets *no* response (the deserialisation error escapes before the
request id is known) plus a ``showMessage`` popup. Here every frame is first parsed as plain JSON;
a request (``id`` + ``method``) that cannot be structured, is too large, arrives after ``shutdown``
or has an invalid shape is answered with the JSON-RPC error it deserves (-32602, -32600). Frames
without an id are logged and dropped. Header lines are read with a length limit.
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
from typing import Any, BinaryIO, Protocol

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
_CONTENT_LENGTH = re.compile(rb"^content-length:\s*(\d+)\s*$", re.IGNORECASE)
_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')
_CHUNK = 1 << 20


class AsyncReader(Protocol):
    async def readline(self) -> bytes: ...

    async def read(self, n: int) -> bytes: ...


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

    async def readline(self) -> bytes:
        return await self._submit(self.stdin.readline, MAX_HEADER_LINE)

    async def read(self, n: int) -> bytes:
        return await self._submit(self.stdin.read, n)


class StreamReader:
    """An asyncio stream (TCP) as an ``AsyncReader``."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader

    async def readline(self) -> bytes:
        try:
            return await self.reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as e:
            return e.partial
        except asyncio.LimitOverrunError as e:
            return await self.reader.read(e.consumed)

    async def read(self, n: int) -> bytes:
        try:
            return await self.reader.readexactly(n)
        except asyncio.IncompleteReadError as e:
            return e.partial


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


def _error(protocol: JsonRPCProtocol, msg_id: Any, exc: JsonRpcException) -> None:
    protocol._send_response(msg_id, error=exc.to_response_error())


def _valid_id(v: Any) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or isinstance(v, str)


def dispatch(protocol: JsonRPCProtocol, body: bytes) -> None:
    """Handle one frame body; never raises."""
    try:
        raw = json.loads(body)
    except (ValueError, RecursionError) as exc:
        log.warning("dropped a frame that is not JSON: %s", exc)
        return
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
            _error(protocol, msg_id, JsonRpcInvalidRequest("not a JSON-RPC 2.0 request"))
        else:
            log.warning("dropped an invalid frame")
        return
    if is_request and getattr(protocol, "_shutdown", False) and method != "exit":
        _error(protocol, msg_id, JsonRpcInvalidRequest("server is shutting down"))
        return
    try:
        message = json.loads(body, object_hook=protocol.structure_message)
    except JsonRpcException as exc:
        if is_request:
            _error(protocol, msg_id, exc)
        else:
            log.warning("dropped an invalid %s notification: %s", method, exc)
        return
    except Exception as exc:  # noqa: BLE001 - cattrs may raise anything on hostile input
        if is_request:
            _error(protocol, msg_id, JsonRpcInvalidParams(str(exc)[:200]))
        else:
            log.warning("dropped an invalid %s notification: %s", method, exc)
        return
    if is_request and not hasattr(message, "id"):  # a notification method sent with an id
        _error(protocol, msg_id, JsonRpcInvalidRequest(f"{method} is a notification, not a request"))
        return
    try:
        protocol.handle_message(message)
    except Exception as exc:  # pygls answers handler errors itself; this is the last line of defence
        log.exception("failed to handle %s", method)
        if is_request:
            _error(protocol, msg_id, JsonRpcInternalError(str(exc)[:200]))


async def _discard(reader: AsyncReader, n: int) -> bytes:
    """Skip ``n`` bytes, keeping the first chunk (to find the request id)."""
    head = b""
    while n > 0:
        chunk = await reader.read(min(n, _CHUNK))
        if not chunk:
            break
        if not head:
            head = chunk
        n -= len(chunk)
    return head


async def read_loop(reader: AsyncReader, protocol: JsonRPCProtocol, stop: threading.Event,
                    max_bytes: int = MAX_MESSAGE_BYTES) -> None:
    """Read frames until EOF or ``stop``; each is handled by ``dispatch``."""
    length: int | None = None
    while not stop.is_set():
        header = await reader.readline()
        if not header:
            break
        if not header.endswith(b"\n"):  # an over-long header line: resynchronise on the next one
            log.warning("dropped an over-long header line")
            continue
        m = _CONTENT_LENGTH.match(header.strip())
        if m:
            length = int(m.group(1))
            continue
        if header.strip():
            continue  # other headers (Content-Type) are ignored
        if length is None:
            continue  # a blank line without a length: noise between frames
        n, length = length, None
        if n > max_bytes:
            head = await _discard(reader, n)
            log.warning("dropped a %d-byte message (limit %d)", n, max_bytes)
            mid = _ID.search(head[:4096])
            if mid and b'"method"' in head:
                _error(protocol, json.loads(mid.group(1)), JsonRpcInvalidRequest(f"message larger than {max_bytes} bytes"))
            continue
        body = await reader.read(n)
        if len(body) < n:
            break
        dispatch(protocol, body)


def start_io(protocol: JsonRPCProtocol, stop: threading.Event, stdin: BinaryIO | None = None,
             stdout: BinaryIO | None = None) -> int:
    """Serve over stdio until EOF or ``exit``; the exit code (0 after a shutdown request)."""
    protocol.set_writer(SafeWriter(stdout or sys.stdout.buffer, stop))
    reader = StdinReader(stdin or sys.stdin.buffer)
    try:
        asyncio.run(read_loop(reader, protocol, stop))
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 0
    except (BrokenPipeError, KeyboardInterrupt):
        return 1
    return 0 if getattr(protocol, "_shutdown", False) else 1


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
        protocol.set_writer(_Writer(w))
        await read_loop(StreamReader(r), protocol, stop)

    async def main() -> None:
        server = await asyncio.start_server(conn, host, port, limit=MAX_HEADER_LINE * 8)
        log.info("listening on %s:%s", host, port)
        async with server:
            await server.serve_forever()

    try:
        asyncio.run(main())
    except (KeyboardInterrupt, SystemExit):
        pass
