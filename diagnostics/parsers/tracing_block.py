"""New NKI compiler (nki 0.x, KLR front end) errors and warnings.

Errors come as ``Error(s) during tracing`` followed by blocks of ``<file>:<line>:`` / the source line /
``<spaces>^-- <message>`` (the caret sits under the offending expression; an inner block followed by
``called from`` blocks for nested calls). Warnings are ``<file>:<line>:<col>:<message>``. A newer form
is ``assertion failed: <message>`` with ``Called from <file> in <func>()``; its lines may be wrapped.
"""

from __future__ import annotations

import re

from .common import Finding, continuation
from .messages import classify

_CARET = re.compile(r"^(?P<ind>\s*)\^--\s?(?P<msg>.*)$")
_HEADER = re.compile(r"^\s*(?P<f>\S[^:]{0,500}\.py):(?P<l>\d{1,9}):\s*$")
_WARN = re.compile(r"^(?P<f>\S{1,500}\.py):(?P<l>\d{1,9}):(?P<c>\d{1,6}):\s*(?P<msg>.+)$")
_ASSERT = re.compile(r"^\s*assertion failed:\s*(?P<msg>.*)$", re.IGNORECASE)
_CALLED = re.compile(r"Called from (?P<f>\S{1,500}?\.py)(?: in (?P<fn>[\w.]{1,200})\(\))?", re.IGNORECASE)
# Front-end messages printed without an exception class (harness logs keep only the message).
_BARE = re.compile(r"^\s*(?:unsupported expression|unexpected output dependencies)", re.IGNORECASE)
_ELLIPSIS = re.compile(r"^\s*\.\.\.\s?")


def parse(lines: list[str], known: frozenset[str]) -> list[Finding]:
    out: list[Finding] = []
    primary: Finding | None = None
    for i, ln in enumerate(lines):
        if "^--" in ln:
            m = _CARET.match(ln)
            if not m:
                continue
            msg = m["msg"].strip()
            code_line = lines[i - 1] if i >= 1 else ""
            header = _HEADER.match(lines[i - 2]) if i >= 2 else None
            path, line = (header["f"].strip(), int(header["l"])) if header else (None, None)
            col = len(m["ind"]) + 1
            if msg.lower() == "called from":
                if primary is not None and path and line:
                    primary.related.append((path, line, col, "called from here"))
                continue
            code_text = _ELLIPSIS.sub("", code_line).strip() or None
            primary = Finding(classify(msg, known) or "nki_trace_error", msg, i, "nki", path=path, line=line,
                              column=col if header else None, code_text=code_text)
            out.append(primary)
        elif ".py:" in ln and (w := _WARN.match(ln)):
            out.append(Finding("nki_trace_warning", w["msg"].strip(), i, "nki", path=w["f"], line=int(w["l"]),
                               column=int(w["c"]) or 1, severity="warning"))
        elif "ssertion failed" in ln and (a := _ASSERT.match(ln)):
            more, _ = continuation(lines, i, None, limit=6)
            text = " ".join([a["msg"].strip(), *more])
            called = _CALLED.search(text)
            if called:
                text = text[:called.start()].strip()
            out.append(Finding(classify(text, known) or "nki_trace_error", text, i, "nki",
                               path=called["f"] if called else None, function=called["fn"] if called else None))
        elif _BARE.match(ln) and (code := classify(ln, known)):
            out.append(Finding(code, ln.strip(), i, "nki"))
    return out
