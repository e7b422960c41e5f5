"""Cold checks of large files on two cores: a helper process analyses half of a file's new functions.

``check_text`` caches chunk parses (``source``) and per-function results (by context, function text and
the module-level bindings the analysis read),
so a check that finds everything cached costs a couple of milliseconds. When much of a file is new (the
first check of a file, or an import edit that changes every function's context), ``split`` picks the
chunks that need work and halves them by size; the helper process parses and analyses the second half
while this process does the first (``warm``: the same code on both sides), and the helper's chunk facts
and results are put into this process's caches. A context change (an import edit) that leaves many
cached chunks' functions to analyse again (a changed generation or target, or a constant many kernels
read) is shared the same way, under the real context. Then the ordinary check runs and finds them there: it
still decides everything (layout, context, merges of chunks that do not parse alone), so the result is
exactly a sequential check's (``tests/diagnostics/test_static_parallel.py``).

The halves are analysed under a guessed context: the imports and integer constants found on column-0
lines (``guess_ops``). Each warmed result carries what its analysis read (``reads.Reads``), and the
ordinary check reuses it only if those reads hold under the real bindings; where the real context
differs (say an import written at column 0 inside a docstring) in something a function read, it
computes its own: slower, never different.

The helper is opt-in (``enable()``: the language server and the benchmark; a one-shot CLI run would
pay more to start it than it saves), starts in the background, is used only once it says it is ready,
serves one request at a time, and is only ever a shortcut: if it is busy, dies, errs or stalls, the check
goes on in this process alone. It parses and interprets text; it never runs the user's code.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from ..model import Diagnostic
from . import analyse, source
from .reads import Reads
from .source import Chunk, Op, SourceInfo

MIN_CHARS = 12_000  # below ~300 lines of new code a round trip to the helper costs more than it saves
REPLY_TIMEOUT_S = 5.0  # a helper slower than this on half a file (<= 2 MB) is stuck: it is stopped
ENV_SWITCH = "NKI_AGENT_CHECK_HELPER"  # "0" turns the helper off (one core, or to compare)

# a column-0 import, or NAME = <digit...>: the module-level facts the context is made of (after a "\n")
_TOP_FACT = re.compile(r"\n((?:import|from)[ \t][^\n]*|[A-Za-z_]\w*[ \t]*=[ \t]*[0-9][^\n]*)")

# (chunk text, its facts) and (function text, what its analysis read, its diagnostics)
Warmed = tuple[list[tuple[str, Chunk]], list[tuple[str, Reads, list[Diagnostic]]]]


def guess_ops(text: str) -> list[Op]:
    """The imports and integer constants of ``text``'s column-0 statements, without parsing the file."""
    ops: list[Op] = []
    for m in _TOP_FACT.finditer("\n" + text):
        stmt = m.group(1)
        if stmt.count("(") > stmt.count(")"):  # from x import (a,\n    b)
            close = text.find(")", m.end(1) - 1)
            stmt = text[m.start(1) - 1: close + 1] if close >= 0 else stmt
        while stmt.endswith("\\"):  # a backslash continuation
            nxt = text.find("\n", m.start(1) - 1 + len(stmt) + 1)
            stmt = text[m.start(1) - 1: nxt if nxt >= 0 else len(text)]
            if nxt < 0:
                break
        module = source.parse(stmt)
        if module is not None:
            ops.extend(source.module_ops(module.body))
    return ops


def info_of(ops: list[Op]) -> SourceInfo:
    info = SourceInfo()
    source.replay(ops, info)
    info.generation = source.generation_of(info.aliases)
    return info


def new_chars(text: str) -> int:
    """Size of the chunks of ``text`` never parsed before (a cheap first test: no parse, no context)."""
    offsets = source.cut_offsets(text)
    return sum(b - a for a, b in zip(offsets, offsets[1:] + [len(text)]) if source.cached_chunk(text[a:b]) is None)


def split(text: str, analysed: Callable[[str], bool]) -> tuple[list[str], list[str]]:
    """Chunks of ``text`` that need work (a parse, or an analysis of a function ``analysed`` does not know
    under this context), halved by size."""
    offsets = source.cut_offsets(text)
    todo = []
    for a, b in zip(offsets, offsets[1:] + [len(text)]):
        piece = text[a:b]
        known = source.cached_chunk(piece)
        if known is None or (known.ok and any(not analysed(piece[s:e]) for _, s, e in known.functions)):
            todo.append(piece)
    return halve(todo)


def halve(texts: list[str]) -> tuple[list[str], list[str]]:
    """``texts`` cut in two, in order, the first part holding about half of the characters."""
    total, acc = sum(map(len, texts)), 0
    for k, text in enumerate(texts):
        acc += len(text)
        if acc * 2 >= total:
            return texts[:k + 1], texts[k + 1:]
    return texts, []


def ops_of(aliases: dict[str, str], constants: dict[str, int]) -> list[Op]:
    """Ops that rebuild these aliases and constants, in the same order (``info_of(ops_of(...))``)."""
    return [("set", k, v) for k, v in aliases.items()] + [("const", k, v) for k, v in constants.items()]


def warm(pieces: list[str], ops: list[Op], settings: analyse.Settings, module_text: str) -> Warmed:
    """Parse ``pieces`` and analyse their functions under the context of ``ops`` (both processes)."""
    info = info_of(ops)
    chunks: list[tuple[str, Chunk]] = []
    results: list[tuple[str, Reads, list[Diagnostic]]] = []
    for piece in pieces:
        chunk, nodes = source.parse_chunk(piece)
        chunks.append((piece, chunk))
        if not chunk.ok:
            continue  # merged with its neighbours by the ordinary check
        for unit in source.units_of(piece, chunk, nodes):
            failed: list[str] = []
            reads: list[Reads] = []
            found = analyse.check_unit(unit, info, settings, module_text, failed, reads)
            if not failed and reads:  # a rule that crashed is reported by the ordinary check
                results.append((unit.text, reads[0], found))
    return chunks, results


class Helper:
    """The helper process and its pipe; every method is safe to call from any thread."""

    def __init__(self) -> None:
        read_req, write_req = os.pipe()
        read_rep, write_rep = os.pipe()
        code = "from nki_agent.diagnostics.static.parallel import serve; serve()"
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(read_req), str(write_rep)],
                                     pass_fds=(read_req, write_rep), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(read_req)
        os.close(write_rep)
        self.requests, self.replies = Connection(write_req, readable=False), Connection(read_rep, writable=False)
        self.lock = threading.Lock()  # one request at a time
        self.ready = False
        self.served = 0  # requests answered (tests check that the helper really worked)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def poll_ready(self) -> bool:
        """Whether the helper has started (never blocks)."""
        if not self.ready and self.lock.acquire(blocking=False):
            try:
                if self.alive() and self.replies.poll(0):
                    self.ready = self.replies.recv() == "ready"
            except (OSError, EOFError):
                self.stop()
            finally:
                self.lock.release()
        return self.ready and self.alive()

    def wait_ready(self, timeout: float) -> bool:
        """Block until the helper has started (benchmarks and tests), at most ``timeout`` seconds."""
        with self.lock:
            try:
                if not self.ready and self.replies.poll(timeout):
                    self.ready = self.replies.recv() == "ready"
            except (OSError, EOFError):
                self.stop()
        return self.ready and self.alive()

    def stop(self) -> None:
        self.ready = False
        for conn in (self.requests, self.replies):
            try:
                conn.close()
            except OSError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Job:
    """One request in flight; ``result()`` waits for the reply and frees the helper."""

    def __init__(self, helper: Helper) -> None:
        self.helper = helper

    def result(self) -> Warmed | None:
        helper = self.helper
        try:
            if not helper.replies.poll(REPLY_TIMEOUT_S):
                helper.stop()  # stuck: a late reply must never answer the next request
                return None
            reply = helper.replies.recv()
            helper.served += 1
            return reply if isinstance(reply, tuple) else None
        except (OSError, EOFError, ValueError, TypeError, AttributeError, ImportError):
            helper.stop()
            return None
        finally:
            helper.lock.release()


_helper: Helper | None = None
_helper_lock = threading.Lock()
_starts = 0
_MAX_STARTS = 3  # a helper that keeps dying is not restarted forever


def enable() -> Helper | None:
    """Start the helper (in the background; checks use it once it is ready). None if switched off."""
    global _helper, _starts
    if os.environ.get(ENV_SWITCH, "1") == "0" or (os.cpu_count() or 1) < 2:
        return None
    with _helper_lock:
        if (_helper is None or not _helper.alive()) and _starts < _MAX_STARTS:
            if _helper is not None:
                _helper.stop()
            _starts += 1
            try:
                _helper = Helper()
            except (OSError, ValueError):  # no processes here, or no fd passing (not POSIX): one core it is
                _helper = None
        return _helper


def disable() -> None:
    """Stop the helper (server shutdown, tests)."""
    global _helper, _starts
    with _helper_lock:
        if _helper is not None:
            _helper.stop()
        _helper, _starts = None, 0


def submit(pieces: list[str], ops: list[Op], settings: analyse.Settings, module_text: str) -> Job | None:
    """Send work to the helper if it is ready and idle; None otherwise (the caller does it itself)."""
    helper = _helper
    if helper is None or not helper.poll_ready() or not helper.lock.acquire(blocking=False):
        return None
    try:
        helper.requests.send((pieces, ops, settings, module_text))
    except (OSError, ValueError):
        helper.lock.release()
        helper.stop()
        return None
    return Job(helper)


def active() -> bool:
    """Whether cold checks can use the helper now; a helper that died is restarted (in the background)."""
    helper = _helper
    if helper is None:
        return False
    if not helper.alive():
        enable()
        return False
    return helper.poll_ready()


def serve() -> None:
    """The helper's main loop: requests in, warmed chunk facts and results out, until the pipe closes."""
    import gc

    requests, replies = Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False)
    replies.send("ready")
    while True:
        try:
            request: Any = requests.recv()
        except (EOFError, OSError):
            return
        gc.disable()  # as in check_text: the parse builds tens of thousands of objects
        try:
            reply: Any = warm(*request)
        except Exception:  # noqa: BLE001 -- a failed half is recomputed by the caller; keep serving
            reply = None
        finally:
            source.clear_cache()  # the caller keeps the facts; this process holds nothing between requests
            gc.enable()
        try:
            replies.send(reply)
        except (OSError, ValueError):
            return
