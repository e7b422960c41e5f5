"""What every output parser shares: the bounded view of a log and the ``Finding`` a parser reports.

A ``Finding`` is a parser's raw result (code, message, whatever location the output itself gave);
``parsers.__init__`` places it in the user's source and turns it into a ``Diagnostic``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Bound the work on hostile input: a 50 MB log is cut to its head and tail (errors sit at the end).
MAX_CHARS = 2_000_000
HEAD_CHARS = 200_000  # the start of a log holds the command line and early front-end errors
# One pathological line (minified JSON, binary) must not make every regex scan megabytes.
MAX_LINE = 2_000
# After the char cap, also cap lines: each parser is a few regexes per line.
MAX_LINES = 40_000

# Frames of code that is not the user's: Cython frames of neuronxcc, installed packages, the stdlib.
_NOT_USER = re.compile(r"(^|[/\\])(neuronxcc|site-packages|dist-packages|torch_neuronx|libneuronxla|torch_xla)[/\\]"
                       r"|^<|[/\\]lib[/\\]python3[\d.]*[/\\]|[/\\]nki_agent[/\\]")
_FRAME = re.compile(r'^\s*File "(?P<f>[^"]{1,500})", line (?P<l>\d{1,9})(?:, in (?P<fn>.{1,200}))?\s*$')


@dataclass
class Finding:
    """One error recognised in the output, before it is placed in the user's source."""

    code: str
    message: str
    order: int  # index of the log line where it was recognised
    source: str  # who reported it: "nki", "neuronx-cc", "neuron-runtime", "nki-agent"
    path: str | None = None
    line: int | None = None
    column: int | None = None  # 1-based, when the output gives it (caret)
    code_text: str | None = None  # the source text the output quotes, to find it in the user's file
    function: str | None = None  # a function the output names ("Called from f.py in _impl()")
    tensors: tuple[str, ...] = ()  # tensor names a backend message mentions, most likely culprit first
    related: list[tuple[str, int, int, str]] = field(default_factory=list)
    severity: str = "error"
    envelope: int = 0  # 0 = a specific error; >0 = a generic wrapper (crash, ICE, "compilation failed"), rank
    hint: str = ""


@dataclass(frozen=True)
class Frame:
    path: str
    line: int
    function: str
    order: int
    code_text: str | None

    @property
    def is_user(self) -> bool:
        return self.path.endswith(".py") and not _NOT_USER.search(self.path)


def bound(text: str) -> tuple[list[str], bool]:
    """The lines to parse (head + tail of a huge log, long lines cut) and whether anything was cut."""
    cut = False
    if len(text) > MAX_CHARS:
        text = text[:HEAD_CHARS] + "\n...\n" + text[-(MAX_CHARS - HEAD_CHARS):]
        cut = True
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        lines = lines[:MAX_LINES // 10] + ["..."] + lines[-(MAX_LINES - MAX_LINES // 10):]
        cut = True
    for i, ln in enumerate(lines):
        if len(ln) > MAX_LINE:
            lines[i] = ln[:MAX_LINE]
            cut = True
    return lines, cut


def frames(lines: list[str]) -> list[Frame]:
    """Every Python traceback frame in the output, in order, with the code line printed under it."""
    out: list[Frame] = []
    for i, ln in enumerate(lines):
        if "File \"" not in ln:
            continue
        m = _FRAME.match(ln)
        if not m:
            continue
        text = None
        if i + 1 < len(lines):
            nxt = lines[i + 1].strip()
            if nxt and not nxt.startswith(("File \"", "Traceback", "...")) and not set(nxt) <= set("^~ "):
                text = nxt
        out.append(Frame(m["f"], int(m["l"]), (m["fn"] or "").strip(), i, text))
    return out


def continuation(lines: list[str], start: int, stop: re.Pattern[str] | None, limit: int = 8) -> tuple[list[str], int]:
    """Lines after ``start`` that continue a message (non-blank, not '...', not a new record), and the last index."""
    out: list[str] = []
    j = start
    while j + 1 < len(lines) and len(out) < limit:
        nxt = lines[j + 1].strip()
        if not nxt or nxt.startswith("...") or (stop is not None and stop.search(nxt)):
            break
        out.append(nxt)
        j += 1
    return out, j
