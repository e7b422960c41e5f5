"""The scriptable local HTTP server under both fake LLM APIs, and the replies a test can script.

A fake is a stdlib ``ThreadingHTTPServer`` on 127.0.0.1 with a random port. Each POST is parsed,
recorded in ``requests`` and answered by the next scripted reply (or by ``handler(body)``); the
subclass (``fake_anthropic`` / ``fake_openai``) renders a reply in its API's wire format, as plain
JSON or as a server-sent-event stream when the request asked for ``"stream": true``.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

HOST = "127.0.0.1"  # the fakes never listen anywhere else
POLL_SECONDS = 0.02  # serve_forever's shutdown check: close() returns this fast (the stdlib default is 0.5 s)


@dataclass(frozen=True)
class FakeUsage:
    """Token counts a fake reports (rendered as each API spells them)."""

    input_tokens: int = 100
    output_tokens: int = 20
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True)
class Call:
    """One tool call of a ``ToolUse`` turn. ``arguments`` as a str is sent verbatim (malformed JSON)."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None  # None: the fake numbers it (toolu_fake_N / call_fake_N)


@dataclass(frozen=True)
class Text:
    """A turn of text only. ``stop_reason`` None: the API's normal end (end_turn / stop)."""

    text: str
    stop_reason: str | None = None
    usage: FakeUsage = FakeUsage()


@dataclass(frozen=True)
class ToolUse:
    """A turn that calls tools, optionally after some text."""

    calls: Sequence[Call]
    text: str = ""
    stop_reason: str | None = None  # None: tool_use / tool_calls
    usage: FakeUsage = FakeUsage()


@dataclass(frozen=True)
class HttpError:
    """An HTTP error status before any body. ``body`` None: the API's own error shape.

    ``retry_after`` is sent as the ``retry-after`` header unless None ("0" keeps retrying tests fast).
    """

    status: int
    message: str = "fake error"
    body: Any = None  # dict -> JSON, str/bytes -> sent as is
    retry_after: str | None = "0"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Garbage:
    """A 200 whose body is not what the API sends."""

    data: bytes = b"\x00\xff<html>this is not json{"
    status: int = 200
    content_type: str = "application/json"


@dataclass
class Stall:
    """Send the start of a reply (``text`` streamed, or nothing for a non-streaming request), set
    ``stalled``, then hang until ``release`` is set (the fake sets it when it closes), then drop."""

    text: str = "Thinking"
    stalled: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class CutOff:
    """``reply`` streamed, but the connection drops after its first ``after`` events (a
    non-streaming request gets half of the JSON body, then the drop)."""

    reply: Text | ToolUse
    after: int = 3


@dataclass(frozen=True)
class StreamError:
    """A stream that reports an error event mid-way (e.g. Anthropic's ``overloaded_error``)."""

    error_type: str = "overloaded_error"
    message: str = "Overloaded"
    text: str = "Partial"


Reply = Text | ToolUse | HttpError | Garbage | Stall | CutOff | StreamError
Script = Sequence[Reply | str] | Callable[[Any], Reply | str]


@dataclass
class RecordedRequest:
    """One request as the fake saw it: ``headers`` with lower-case names, ``body`` parsed JSON."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class Dropped(Exception):
    """Raised inside a handler to end the connection without a complete response."""


class Responder:
    """What a renderer writes with: plain responses, or a chunked event stream."""

    def __init__(self, handler: BaseHTTPRequestHandler):
        self._h = handler

    def send(self, status: int, data: bytes, content_type: str = "application/json",
             headers: dict[str, str] | None = None, truncate: bool = False) -> None:
        h = self._h
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        if truncate:  # promise the whole body, send half, drop
            h.wfile.write(data[: len(data) // 2])
            self.drop()
        h.wfile.write(data)

    def send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self.send(status, json.dumps(obj).encode(), headers=headers)

    def start_stream(self, headers: dict[str, str] | None = None) -> None:
        h = self._h
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream; charset=utf-8")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Transfer-Encoding", "chunked")
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()

    def chunk(self, data: bytes) -> None:
        w = self._h.wfile
        w.write(b"%x\r\n%s\r\n" % (len(data), data))
        w.flush()

    def end_stream(self) -> None:
        self._h.wfile.write(b"0\r\n\r\n")
        self._h.wfile.flush()

    def drop(self) -> None:
        """Abort the connection here (a cut-off stream or body)."""
        try:
            self._h.wfile.flush()
            self._h.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        raise Dropped()


class FakeServer:
    """Base of the fake API servers: lifecycle, recording, scripting. Subclasses render replies."""

    paths: tuple[str, ...] = ()  # request paths (suffixes) the API answers
    api_prefix = ""  # appended to the root URL in ``base_url`` (OpenAI clients expect ".../v1")

    def __init__(self, script: Script | None = None, *, require_key: str | None = None,
                 model: str = "fake-model"):
        self.requests: list[RecordedRequest] = []
        self.errors: list[Exception] = []  # exceptions of a ``handler`` script (answered with a 400)
        self.model = model
        self.require_key = require_key
        self._handler: Callable[[Any], Reply | str] | None = None
        self._script: list[Reply | str] = []
        if callable(script):
            self._handler = script
        elif script is not None:
            self._script = list(script)
        self._lock = threading.Lock()
        self._stalls: list[Stall] = []
        self._ids = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle -------------------------------------------------------------------------------
    def start(self) -> Self:
        fake = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # small writes (headers, then body) would otherwise wait ~40 ms

            def do_POST(self) -> None:
                fake._serve(self)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        self._httpd = ThreadingHTTPServer((HOST, 0), _Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(POLL_SECONDS,), name="fake-llm-api",
                                        daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        with self._lock:
            stalls = list(self._stalls)
        for s in stalls:
            s.release.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join()
        self._httpd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def root_url(self) -> str:
        assert self._httpd is not None, "fake server not started"
        return f"http://{HOST}:{self._httpd.server_address[1]}"

    @property
    def base_url(self) -> str:
        """What to pass as the SDK's ``base_url``."""
        return self.root_url + self.api_prefix

    # scripting -------------------------------------------------------------------------------
    def add(self, *replies: Reply | str) -> None:
        """Append replies to the script."""
        with self._lock:
            self._script.extend(replies)

    @property
    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]

    def next_id(self, prefix: str) -> str:
        with self._lock:
            self._ids += 1
            return f"{prefix}{self._ids:04d}"

    def _next_reply(self, body: Any) -> Reply:
        if self._handler is not None:
            try:
                reply = self._handler(body)
            except Exception as e:  # noqa: BLE001 - reported to the test as a non-retried 400
                self.errors.append(e)
                return HttpError(400, f"fake handler raised {e!r}", retry_after=None)
        else:
            with self._lock:
                if not self._script:
                    return HttpError(400, "fake script exhausted: no reply left for this request",
                                     retry_after=None)
                reply = self._script.pop(0)
        return Text(reply) if isinstance(reply, str) else reply

    # serving ---------------------------------------------------------------------------------
    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        out = Responder(h)
        try:
            length = int(h.headers.get("Content-Length") or 0)
            raw = h.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            headers = {k.lower(): v for k, v in h.headers.items()}
            with self._lock:
                self.requests.append(RecordedRequest(h.command, h.path, headers, body))
            if not any(h.path.split("?")[0].endswith(p) for p in self.paths):
                self.render_error(out, HttpError(404, f"no route {h.path}", retry_after=None))
                return
            if self.require_key is not None and not self.key_ok(headers):
                self.render_error(out, HttpError(401, "invalid x-api-key", retry_after=None))
                return
            if not isinstance(body, dict):
                self.render_error(out, HttpError(400, "body is not a JSON object", retry_after=None))
                return
            reply = self._next_reply(body)
            stream = body.get("stream") is True
            if isinstance(reply, Stall):
                with self._lock:
                    self._stalls.append(reply)
                self.render_stall(out, reply, body, stream)
            elif isinstance(reply, HttpError):
                self.render_error(out, reply)
            elif isinstance(reply, Garbage):
                out.send(reply.status, reply.data, reply.content_type)
            else:
                self.render(out, reply, body, stream)
        except Dropped:
            h.close_connection = True
        except (BrokenPipeError, ConnectionResetError):  # the client went away (cancelled)
            h.close_connection = True

    def _stall_wait(self, out: Responder, stall: Stall) -> None:
        stall.stalled.set()
        stall.release.wait()
        out.drop()

    def key_ok(self, headers: dict[str, str]) -> bool:
        given = {headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer ")}
        return self.require_key in given

    # what subclasses implement -----------------------------------------------------------------
    def render(self, out: Responder, reply: Text | ToolUse | CutOff | StreamError, body: dict[str, Any],
               stream: bool) -> None:
        raise NotImplementedError

    def render_error(self, out: Responder, err: HttpError) -> None:
        raise NotImplementedError

    def render_stall(self, out: Responder, stall: Stall, body: dict[str, Any], stream: bool) -> None:
        raise NotImplementedError


def chunks(text: str, size: int) -> Iterable[str]:
    """``text`` in pieces of ``size`` characters (the way the APIs stream deltas)."""
    return (text[i:i + size] for i in range(0, len(text), size))
