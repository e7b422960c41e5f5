"""Maps simulator events to the user's source: deepest user frame, exact span, and AST context.

The simulator raises from inside its own modules; the location a user needs is the call site in the
kernel. A frame is "user code" when its file is not part of this package, the standard library or an
installed package, so helpers in the user's project count as user code too.
"""

from __future__ import annotations

import ast
import contextvars
import linecache
import os
import sys
import sysconfig
from functools import lru_cache
from types import CodeType, FrameType, TracebackType

from nki_agent.toolchain.facts.errors import SourceLocation

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_SKIP_PREFIXES = tuple(
    {os.path.abspath(p) for p in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
                                  sysconfig.get_paths()["platlib"]) if p}
)


@lru_cache(maxsize=4096)
def is_user_file(filename: str) -> bool:
    """True for files written by the user (kernels, tasks, their helpers)."""
    if not filename or filename.startswith("<frozen"):
        return False
    if filename.startswith("<"):
        return True  # exec'd source strings are user code
    path = os.path.abspath(filename)
    if path.startswith(_PKG_DIR + os.sep):
        return False
    return not any(path.startswith(p + os.sep) for p in _SKIP_PREFIXES)


_POSITIONS: dict[CodeType, list[tuple[int | None, int | None, int | None, int | None]]] = {}


def _positions(code: CodeType) -> list[tuple[int | None, int | None, int | None, int | None]]:
    pos = _POSITIONS.get(code)
    if pos is None:
        if len(_POSITIONS) > 4096:  # bound the cache; code objects of long-gone kernels are not reused
            _POSITIONS.clear()
        pos = _POSITIONS[code] = list(code.co_positions())
    return pos


def frame_location(frame: FrameType) -> SourceLocation:
    """Exact span of the instruction a frame is executing (1-based line and column)."""
    code = frame.f_code
    line, end_line, col, end_col = frame.f_lineno, None, None, None
    try:
        pos = _positions(code)[frame.f_lasti // 2]
        if pos[0] is not None:
            line, end_line, col, end_col = pos
    except (IndexError, ValueError):
        pass
    return SourceLocation(
        path=code.co_filename,
        line=line or 1,
        column=(col or 0) + 1,
        end_line=end_line or line or 1,
        end_column=(end_col + 1) if end_col is not None else None,
    )


def user_frame(start: FrameType | None = None) -> FrameType | None:
    """The innermost frame that belongs to user code, walking outward from ``start``."""
    frame: FrameType | None = start if start is not None else sys._getframe(1)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return frame
        frame = frame.f_back
    return None


# While the executor replays a traced program (``sim/replay.py``) there is no user frame: the location of
# the event being replayed stands in for it.
_REPLAY_AT: contextvars.ContextVar[SourceLocation | None] = contextvars.ContextVar("nki_replay_at", default=None)


def replay_location() -> SourceLocation | None:
    """The source location of the traced call being replayed (None outside a replay)."""
    return _REPLAY_AT.get()


def set_replay_location(loc: SourceLocation | None) -> contextvars.Token[SourceLocation | None]:
    return _REPLAY_AT.set(loc)


def reset_replay_location(token: contextvars.Token[SourceLocation | None]) -> None:
    _REPLAY_AT.reset(token)


def caller_location() -> SourceLocation | None:
    """Location of the user code that (directly or through helpers of ours) called the simulator."""
    replayed = _REPLAY_AT.get()
    if replayed is not None:
        return replayed
    frame = user_frame(sys._getframe(1))
    return frame_location(frame) if frame is not None else None


def traceback_location(tb: TracebackType | None) -> SourceLocation | None:
    """Deepest user frame of a traceback, at the instruction that raised."""
    best: SourceLocation | None = None
    while tb is not None:
        if is_user_file(tb.tb_frame.f_code.co_filename):
            code = tb.tb_frame.f_code
            line: int | None = tb.tb_lineno
            end_line: int | None = None
            col: int | None = None
            end_col: int | None = None
            try:
                pos = _positions(code)[tb.tb_lasti // 2]
                if pos[0] is not None:
                    line, end_line, col, end_col = pos
            except (IndexError, ValueError):
                pass
            best = SourceLocation(code.co_filename, line or 1, (col or 0) + 1, end_line or line,
                                  (end_col + 1) if end_col is not None else None)
        tb = tb.tb_next
    return best if best is not None else _REPLAY_AT.get()


@lru_cache(maxsize=256)
def _parents(filename: str, source_len: int) -> tuple[ast.AST, dict[int, ast.AST]] | None:
    source = "".join(linecache.getlines(filename))
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    return tree, parents


def ast_context(loc: SourceLocation) -> list[ast.AST]:
    """AST nodes enclosing a location, innermost first (empty if the source is unavailable)."""
    return list(_ast_context(loc.path, len(linecache.getlines(loc.path)), loc.line, loc.column, loc.end_column))


@lru_cache(maxsize=4096)
def _ast_context(path: str, source_len: int, line: int, column: int, end_column: int | None) -> tuple[ast.AST, ...]:
    loc = SourceLocation(path, line, column, None, end_column)
    parsed = _parents(loc.path, source_len)
    if parsed is None:
        return ()
    tree, parents = parsed
    col0 = loc.column - 1
    best: ast.AST | None = None
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) == loc.line and getattr(node, "col_offset", None) == col0:
            if loc.end_column is None or getattr(node, "end_col_offset", None) == loc.end_column - 1:
                best = node  # walk is breadth-first, so the last exact match is the innermost
    if best is None:
        return ()
    chain = [best]
    while id(chain[-1]) in parents:
        chain.append(parents[id(chain[-1])])
    return tuple(chain)
