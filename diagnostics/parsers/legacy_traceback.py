"""Python exceptions: legacy ``neuronxcc.nki`` tracing tracebacks, ``simulate_kernel`` / ``nki.simulate`` errors.

The classic tracer runs the kernel body as Python, so its errors are ordinary tracebacks: Cython frames
of ``neuronxcc`` (no source line) around the user's frames. The kernel line is the deepest frame in a
user file. ``nki.simulate`` raises plain exceptions the same way; harnesses often keep only the final
``AssertionError: ...`` line, which we still classify (without a line).
"""

from __future__ import annotations

import os
import re

from .common import Finding, Frame, frames
from .messages import classify

# "ValueError: msg", "neuronxcc.nki.NKISyntaxError: msg", "AssertionError" (bare): at line start.
_EXC = re.compile(r"^\s{0,8}(?:[A-Za-z_][\w.]{0,100}\.)?(?P<cls>[A-Z]\w{0,60}(?:Error|Exception)|Exception)"
                  r"(?::\s?(?P<msg>.*))?$")
_ANCHOR = re.compile(r"nki\.errors\.html#(err-[a-z0-9-]+)")
# A traceback header resets the frame window of the next exception.
_TB = "Traceback (most recent call last)"


def deepest_user_frame(fs: list[Frame], source_path: str | None) -> Frame | None:
    """The frame to blame: deepest frame of the given source file, else deepest frame of any user file."""
    if source_path:
        base = os.path.basename(source_path)
        mine = [f for f in fs if os.path.basename(f.path) == base]
        if mine:
            return mine[-1]
    users = [f for f in fs if f.is_user]
    return users[-1] if users else None


def parse(lines: list[str], known: frozenset[str], source_path: str | None) -> list[Finding]:
    all_frames = frames(lines)
    out: list[Finding] = []
    window_start = 0
    for i, ln in enumerate(lines):
        if _TB in ln:
            window_start = i
            continue
        if "Error" not in ln and "Exception" not in ln:
            continue
        m = _EXC.match(ln)
        if not m:
            continue
        cls, msg = m["cls"], (m["msg"] or "").strip()
        if msg.startswith("Error(s) during tracing"):  # the blocks below it are tracing_block's
            continue
        fs = [f for f in all_frames if window_start <= f.order < i]
        window_start = i + 1
        code = classify(msg, known) or _anchor_code(lines, i, known) or "sim_python_exception"
        text = f"{cls}: {msg}" if msg else cls
        f = deepest_user_frame(fs, source_path)
        if f is not None:
            out.append(Finding(code, text, i, "nki", path=f.path, line=f.line, code_text=f.code_text,
                               function=f.function))
        else:
            out.append(Finding(code, text, i, "nki"))
    return out


def _anchor_code(lines: list[str], i: int, known: frozenset[str]) -> str | None:
    """The legacy tracer may print the error-guide URL (with anchor) right after the message."""
    for ln in lines[i + 1:i + 3]:
        m = _ANCHOR.search(ln)
        if m and m.group(1).replace("-", "_") in known:
            return m.group(1).replace("-", "_")
    return None
