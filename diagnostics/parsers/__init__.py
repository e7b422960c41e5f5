"""neuronx-cc / NKI output -> diagnostics at the user's file and line.

``parse_log`` runs every format parser over a bounded view of the output, keeps one finding per log
line (most specific parser wins), drops generic envelopes ("compilation failed", ``[F134]``, the ICE
banner) when a specific error is present, then places each finding: at the file:line the output
names (remapped to ``source_path`` when the file names match), else at the quoted code, the tensor
or the function it names in ``source_text``, else at the kernel ``def``, else at the deepest user
traceback frame, else at the log line itself. Pure: no I/O, no LSP types; never raises on input.
"""

from __future__ import annotations

from .. import catalog
from ..model import Diagnostic, RelatedInfo
from . import backend_codes, legacy_traceback, runtime, tracing_block, wrapper
from .common import Finding, Frame, bound, frames
from .locate import Source

# A log yields a handful of errors; more than this is noise (and bounds the output).
MAX_DIAGNOSTICS = 100
# Markers of a run that succeeded: no "unrecognised output" note for them.
_SUCCESS = ("Compiler status PASS", "NKI_AGENT_COMPILE_OK")


def parse_log(text: str, source_path: str | None = None, source_text: str | None = None,
              log_path: str | None = None) -> list[Diagnostic]:
    """Diagnostics for compiler/simulator output ``text``; at most one info diagnostic if nothing is recognised."""
    try:
        return _parse(text, source_path, source_text, log_path)
    except (RecursionError, MemoryError, ValueError, TypeError) as e:  # defensive: input must never crash us
        return [_info(f"the output could not be parsed ({type(e).__name__})", source_path, log_path)]


def _parse(text: str, source_path: str | None, source_text: str | None, log_path: str | None) -> list[Diagnostic]:
    if not isinstance(text, str) or not text.strip():
        return []
    if _binary(text):
        return [_info("the output is binary data, not compiler or simulator text", source_path, log_path)]
    lines, cut = bound(text)
    known = frozenset(catalog.entries())
    groups = [runtime.parse(lines, known), backend_codes.parse(lines, known), wrapper.parse(lines, known),
              tracing_block.parse(lines, known), legacy_traceback.parse(lines, known, source_path)]
    claimed: dict[int, Finding] = {}  # one finding per log line; groups are in priority order
    for group in groups:
        for f in group:
            claimed.setdefault(f.order, f)
    found = sorted(claimed.values(), key=lambda f: f.order)
    specific = [f for f in found if not f.envelope]
    if specific:
        found = specific
    elif found:
        top = max(f.envelope for f in found)
        found = [next(f for f in found if f.envelope == top)]
    if not found:
        if any(s in text[-100_000:] for s in _SUCCESS):
            return []
        note = "no NKI or neuronx-cc error recognised in this output"
        return [_info(note + (" (it was truncated to its head and tail)" if cut else ""), source_path, log_path)]
    src = Source(source_path, source_text) if source_path and source_text is not None else None
    user = legacy_traceback.deepest_user_frame(frames(lines), source_path)
    out: list[Diagnostic] = []
    seen: set[tuple[str, str, int, str]] = set()
    for f in found[:MAX_DIAGNOSTICS]:
        d = _place(f, src, source_path, log_path, user)
        key = (d.code, d.path, d.line, d.message)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


def _binary(text: str) -> bool:
    sample = text[:8192]
    if "\x00" in sample:
        return True
    bad = sum(1 for ch in sample if (ord(ch) < 32 and ch not in "\t\r\n\f\v\x1b") or ch == "\ufffd")
    return bad > len(sample) // 10


def _info(message: str, source_path: str | None, log_path: str | None) -> Diagnostic:
    e = catalog.lookup("log_unrecognized")
    url = e.doc_url if e else catalog.NCC_INDEX
    return Diagnostic("log_unrecognized", "info", message, log_path or source_path or "<output>", 1, 1, 1, 2,
                      "nki-agent", url)


def _place(f: Finding, src: Source | None, source_path: str | None, log_path: str | None,
           user: Frame | None) -> Diagnostic:
    related: list[RelatedInfo] = [RelatedInfo(p, ln, c, m) for p, ln, c, m in f.related]
    span: tuple[int, int, int, int] | None = None
    path = f.path
    if path and f.line:  # the output names file and line
        if src is not None and src.same_file(path):
            path, span = src.path, src.span(f.line, f.column)
        else:
            if source_path and src is None and _same_name(path, source_path):
                path = source_path
            col = f.column or 1
            span = (f.line, col, f.line, col + 1)
    elif src is not None and (path is None or src.same_file(path)):
        line = _search(f, src)
        path, span = src.path, src.span(line or 1)
        if user is not None and not src.same_file(user.path) and not f.path:
            related.append(RelatedInfo(user.path, user.line, 1, "called from here"))
    elif path:  # a file but no line (e.g. "Called from f.py in g()")
        if source_path and _same_name(path, source_path):
            path = source_path
        span = (1, 1, 1, 2)
    elif user is not None:
        path = user.path
        if src is None and source_path and _same_name(path, source_path):
            path = source_path
        span = (user.line, 1, user.line, 2)
    elif log_path:
        path, span = log_path, (f.order + 1, 1, f.order + 1, 2)
    else:
        path, span = source_path or "<output>", (1, 1, 1, 2)
    return _diagnostic(f, path or "<output>", span, related)


def _search(f: Finding, src: Source) -> int | None:
    if f.code_text and (ln := src.find_code(f.code_text)):
        return ln
    for t in f.tensors:
        if ln := src.find_tensor(t):
            return ln
    if f.function and (ln := src.find_def(f.function)):
        return ln
    return src.kernel_def()


def _same_name(a: str, b: str) -> bool:
    return a.replace("\\", "/").rsplit("/", 1)[-1] == b.replace("\\", "/").rsplit("/", 1)[-1]


def _diagnostic(f: Finding, path: str, span: tuple[int, int, int, int], related: list[RelatedInfo]) -> Diagnostic:
    entry = catalog.lookup(f.code)
    internal = catalog.is_internal(f.code)
    message = f.message.strip() or (entry.title if entry else f.code)
    if entry and entry.title.lower() not in message.lower() and f.code not in message:
        message = f"{entry.title}: {message}"
    if f.hint:
        message += f"\nhint: {f.hint}"
    if internal:
        message += f"\nnot your bug (internal compiler error): {catalog.REPRO_HINT}"
    url = entry.doc_url if entry else catalog.doc_url(f.code) if f.code.startswith(("err_", "sim_")) \
        else catalog.NCC_INDEX
    line, col, end_line, end_col = span
    return Diagnostic(f.code, f.severity, message, path, line, col, end_line, end_col, f.source, url,
                      tuple(related), not_your_bug=internal)


__all__ = ["MAX_DIAGNOSTICS", "parse_log"]
