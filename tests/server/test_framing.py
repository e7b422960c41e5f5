"""Malformed LSP framing against the real server over stdio: each bad frame costs one log line, no more.

One case per framing fault (``CASES``): a fresh ``python -m nki_agent.server`` is initialised, a
document opened, then the faulty bytes are written, followed by a valid ``nki/documentText`` request.
The server must answer that request correctly, log exactly the expected number of transport warnings
(stderr), answer the faulty frame's own request id as the case says (served, a -32600 error, or not
at all -- never twice), and exit cleanly after ``shutdown`` / ``exit``. Timeouts only bound failures.
The same bytes are also fed to ``Framer`` in-process in 1-, 7- and 4096-byte pieces: the frames
that come out do not depend on how the input was split. A declared 10^12 bytes followed by 96 MB of
padding must not grow the server's peak memory.
"""

from __future__ import annotations

import json
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
from nki_agent.server.transport import Framer
from server_helpers import ROOT, SERVER, SERVER_ENV

URI = "file:///tmp/nki-framing/k.py"
TEXT = "import neuronxcc.nki.language as nl\n# Content-Length: 12\r\n\r\n{}\n"  # framing look-alikes in a body
BAD_ID, GOOD_ID = 99, 100
TRANSPORT = " nki_agent.server.transport: "


def body(msg_id: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": "nki/documentText", "params": {"uri": URI}}).encode()


B = body(BAD_ID)
N = len(B)
GARBAGE = bytes(range(256)) * 16 + b"\r\n\r\n\x00\xff: \n"


@dataclass(frozen=True)
class Case:
    name: str
    data: bytes  # written after initialisation, before the valid request
    logs: int  # transport warnings the case costs
    bad_id: Literal["result", "error", "none"] = "none"  # what the faulty frame's own request gets
    piece: int = 0  # write ``data`` and the valid request in pieces of this many bytes (0: at once)
    env: dict[str, str] = field(default_factory=dict)


CASES = [
    Case("length too short", b"Content-Length: 10\r\n\r\n" + B, 1),
    Case("length too long", b"Content-Length: %d\r\n\r\n" % (N + 500) + B, 1, "error"),
    Case("length too long, into the next header", b"Content-Length: %d\r\n\r\n" % (N + 5) + B, 1),
    Case("length too long, then tiny writes", b"Content-Length: %d\r\n\r\n" % (N + 500) + B, 1, "error", piece=3),
    Case("length 10^12", b"Content-Length: 1000000000000\r\n\r\n" + B, 1, "error"),
    Case("length of 40 digits", b"Content-Length: " + b"9" * 40 + b"\r\n\r\n" + B, 1),
    Case("length over the size cap, body complete", b"Content-Length: %d\r\n\r\n" % (N + 3000) + B[:-1] +
         b" " * 3000 + b"}", 1, "error", env={"NKI_AGENT_MAX_MESSAGE_BYTES": "1024"}),
    Case("length non-numeric", b"Content-Length: abc\r\n\r\n" + B, 1),
    Case("length negative", b"Content-Length: -%d\r\n\r\n" % N + B, 1),
    Case("length empty", b"Content-Length:\r\n\r\n" + B, 1),
    Case("length zero", b"Content-Length: 0\r\n\r\n" + B, 1),
    Case("duplicated header, conflicting", b"Content-Length: 5\r\nContent-Length: %d\r\n\r\n" % N + B, 1),
    Case("duplicated header, equal", b"Content-Length: %d\r\ncontent-length: %d\r\n\r\n" % (N, N) + B, 0, "result"),
    Case("no Content-Length", b"Content-Type: application/vscode-jsonrpc\r\n\r\n" + B, 1),
    Case("missing blank line", b"Content-Length: %d\r\n" % N + B, 1),
    Case("header lines ending in LF only", b"Content-Length: %d\nContent-Type: x\n\n" % N + B, 0, "result"),
    Case("header lines ending in CR only", b"Content-Length: %d\r\r" % N + B, 1),
    Case("header without a line end", b"Content-Length: %d" % N + B, 1),
    Case("1 MB header line before the length", b"X-Pad: " + b"a" * (1 << 20) + b"\r\nContent-Length: %d\r\n\r\n" % N + B,
         1, "result"),
    Case("1 MB header line after the length", b"Content-Length: %d\r\nX-Pad: " % N + b"a" * (1 << 20) + b"\r\n\r\n" + B, 1),
    Case("1 MB length value", b"Content-Length: " + b"7" * (1 << 20) + b"\r\n\r\n" + B, 1),
    Case("binary garbage between frames", GARBAGE, 1),
    Case("garbage glued to the next header", b"\x00\xfe}{ not a header", 1),
    Case("frame split into 1-byte writes", b"Content-Length: %d\r\n\r\n" % N + B, 0, "result", piece=1),
]


class Server:
    """The real server on pipes; stdout frames and stderr lines are collected by reader threads."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env={**SERVER_ENV, **env}, cwd=str(ROOT))
        self.responses: dict[Any, list[dict[str, Any]]] = {}
        self.stderr: list[str] = []
        self.cond = threading.Condition()
        self.threads = [threading.Thread(target=self._stdout, daemon=True),
                        threading.Thread(target=self._stderr, daemon=True)]
        for t in self.threads:
            t.start()

    def _stdout(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            length = None
            while (line := out.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if not line or length is None:
                break
            msg = json.loads(out.read(length))
            if "id" in msg and "method" in msg:  # a server -> client request
                self.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": None}).encode())
            with self.cond:
                if "id" in msg and "method" not in msg:
                    self.responses.setdefault(msg["id"], []).append(msg)
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def _stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.decode(errors="replace"))

    def write(self, data: bytes, piece: int = 0) -> None:
        assert self.proc.stdin is not None
        for i in range(0, len(data), piece or len(data) or 1):
            self.proc.stdin.write(data[i:i + piece] if piece else data)
            self.proc.stdin.flush()

    def send(self, obj: dict[str, Any]) -> None:
        b = json.dumps(obj).encode()
        self.write(b"Content-Length: %d\r\n\r\n" % len(b) + b)

    def wait(self, msg_id: int, timeout: float = 20.0) -> dict[str, Any]:
        with self.cond:
            ok = self.cond.wait_for(lambda: msg_id in self.responses or self.proc.poll() is not None, timeout)
        assert ok and msg_id in self.responses, f"no answer to {msg_id} (server rc={self.proc.poll()})"
        return self.responses[msg_id][0]

    def finish(self) -> int:
        """shutdown + exit; the exit code, once both pipes are drained."""
        self.send({"jsonrpc": "2.0", "id": 1000, "method": "shutdown"})
        assert self.wait(1000).get("result", "missing") is None
        self.send({"jsonrpc": "2.0", "method": "exit"})
        rc = self.proc.wait(20)
        for t in self.threads:
            t.join(20)
        return rc


def start(env: dict[str, str] | None = None) -> Server:
    s = Server(env or {})
    s.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}, "rootUri": ROOT.as_uri()}})
    assert "result" in s.wait(1)
    s.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    s.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": URI, "languageId": "python", "version": 1, "text": TEXT}}})
    return s


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_frame_is_dropped_and_the_server_answers_the_next_request(case: Case) -> None:
    s = start(case.env)
    try:
        good = body(GOOD_ID)
        s.write(case.data + b"Content-Length: %d\r\n\r\n" % len(good) + good, case.piece)
        assert s.wait(GOOD_ID)["result"] == {"uri": URI, "version": 1, "text": TEXT}
        assert s.finish() == 0
        answer = s.responses.get(BAD_ID, [{}])[0]
        got = "result" if "result" in answer else "error" if "error" in answer else "none"
        assert got == case.bad_id, answer
        if got == "error":
            assert answer["error"]["code"] == -32600
        assert all(len(v) == 1 for v in s.responses.values()), "a request was answered twice"
        warnings = [line for line in s.stderr if TRANSPORT in line]
        assert len(warnings) == case.logs, "".join(s.stderr)
    finally:
        if s.proc.poll() is None:
            s.proc.kill()


def frames_of(data: bytes, piece: int) -> list[bytes]:
    out: list[bytes] = []

    def on_frame(b: bytes) -> bool:
        try:
            json.loads(b)
        except ValueError:
            return False
        out.append(b)
        return True

    f = Framer(on_frame, lambda prefix, why: out.append(b"cut:" + prefix), lambda head: out.append(b"oversize"),
               max_bytes=1 << 16)
    for i in range(0, len(data), piece):
        f.feed(data[i:i + piece])
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_frames_do_not_depend_on_how_the_input_is_split(case: Case) -> None:
    good = body(GOOD_ID)
    data = case.data + b"Content-Length: %d\r\n\r\n" % len(good) + good
    whole = frames_of(data, len(data))
    assert whole[-1] == good
    pieces: list[int] = [4096, 7] + ([1] if len(data) < 10_000 else [])
    for piece in pieces:
        got = frames_of(data, piece)
        # a length that runs a few bytes into the next header is cut when the body is still
        # incomplete, and dropped as not-JSON when it arrives whole: either way, nothing is served
        assert [f for f in got if not f.startswith(b"cut:")] == [f for f in whole if not f.startswith(b"cut:")]


def peak_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_a_declared_terabyte_is_never_allocated() -> None:
    s = start()
    try:
        before = peak_rss_kb(s.proc.pid)
        s.write(b"Content-Length: 1000000000000\r\n\r\n" + B[:-1])
        pad = b" " * (1 << 20)
        for _ in range(96):
            s.write(pad)
        good = body(GOOD_ID)
        s.write(b"}Content-Length: %d\r\n\r\n" % len(good) + good)
        assert s.wait(GOOD_ID)["result"]["text"] == TEXT
        grown_mb = (peak_rss_kb(s.proc.pid) - before) / 1024
        assert grown_mb < 32, f"peak memory grew by {grown_mb:.0f} MB"
        assert s.finish() == 0
    finally:
        if s.proc.poll() is None:
            s.proc.kill()


def test_framer_memory_stays_bounded_while_skipping() -> None:
    seen: list[int] = []
    f = Framer(lambda b: True, lambda prefix, why: None, lambda head: None)
    f.feed(b"Content-Length: 1000000000000\r\n\r\n" + B)
    chunk = bytes(range(256)) * 4096  # 1 MB with newlines and digits
    for _ in range(32):
        f.feed(chunk)
        seen.append(len(f.buf))
    assert max(seen) < 8192 and f.mode == "skip"


