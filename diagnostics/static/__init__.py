"""As-you-type static checks of NKI kernels: ``check_text(path, text)`` -> diagnostics, no execution.

Pipeline: ``source.layout`` cuts the file into chunks at top-level definitions and finds its imports,
constants and functions (``ast`` per chunk, tree-sitter for the intact functions of a chunk that does
not parse); every function is parsed on its own and abstractly interpreted (``interp.py``); rules
(``rules/``, one file each) turn the events into findings; ``analyse.py`` turns them into diagnostics
of the function; this module owns the caches and places the diagnostics in the file. A rule that
crashes costs one informational diagnostic, never the others. A cold check of a large file shares its
work with a helper process when one is running (``parallel.py``; same result, two cores).

A function's diagnostics depend only on its own text, the settings, the file's API generation, its
column-0 ``NAME = "string"`` lines, and the module-level bindings (imports, integer constants) its
analysis looked up, which it records (``reads.py``). Results are cached by exactly that,
position-independent: while the user types, only the function being edited is parsed and analysed
again; a module-level edit (a constant, an import, a helper) re-analyses only the functions that read a
binding it changed (and the new function itself); and a check after any sequence of edits equals a
check from scratch (``tests/diagnostics/test_static_incremental.py``,
``tests/diagnostics/test_static_module_edits.py``).
"""

from __future__ import annotations

import gc
import re
import threading
from typing import Any

from nki_agent.toolchain.facts.errors import doc_url
from ..model import Diagnostic
from . import parallel, source
from .analyse import (
    KERNEL_DECORATORS,
    SOURCE,
    FunctionContext,
    Settings,
    check_unit,
    dotted_name,
    module_info,
    shift,
)
from .reads import Now, Reads
from .rules import classic_on_new_sdk
from .source import layout

__all__ = ["KERNEL_DECORATORS", "SOURCE", "FunctionContext", "Settings", "check_text", "clear_caches", "dotted_name",
           "module_info"]
MAX_BYTES = 2 * 1024 * 1024  # as-you-type budget: kernel files are KBs; larger files get one info note


def _info(path: str, message: str, code: str = "sim_bad_input") -> Diagnostic:
    return Diagnostic(code, "info", message, path, 1, 1, 1, 2, SOURCE, doc_url(code))


def check_text(path: str, text: str | bytes, settings: Settings | None = None) -> list[Diagnostic]:
    """Static diagnostics of a kernel file's current text (saved or not); safe to call from several threads.

    The cyclic garbage collector is paused for the duration: parsing builds tens of thousands of AST
    objects, whose allocation otherwise triggers repeated full collections (a quarter of a cold check).
    Reference counting still frees everything; cycles wait for the next collection."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _check_text(path, text, settings)
    finally:
        if was_enabled:
            gc.enable()


def _check_text(path: str, text: str | bytes, settings: Settings | None = None) -> list[Diagnostic]:
    settings = settings or Settings()
    if isinstance(text, str) and text.isascii():  # the usual case: no encoding round trip
        size, binary, decoded = len(text), "\x00" in text, text
    else:
        raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
        size, binary = len(raw), b"\x00" in raw
        decoded = raw.decode("utf-8", "replace") if size <= MAX_BYTES and not binary else ""
    if size > MAX_BYTES:
        return [_info(path, f"file is {size} bytes; as-you-type NKI checks skip files over {MAX_BYTES} bytes")]
    if binary:
        return [_info(path, "binary file: no NKI checks")]
    module_text = "\n".join(_MODULE_ASSIGN.findall("\n" + decoded))
    if size >= parallel.MIN_CHARS and parallel.active():
        _warm_in_parallel(decoded, settings, module_text)
    found = layout(decoded)
    info = found.info
    if not info.generation:
        return []
    results = _results_for(_context_key(info.generation, settings))
    now = Now.of(info.aliases, info.constants, module_text)
    if size >= parallel.MIN_CHARS and parallel.active():
        _analyse_in_parallel(found.units, now, settings, module_text, results)
    out: list[Diagnostic] = []
    failed: list[str] = []
    for unit in found.units:
        cached = _lookup(results, unit.text, now)
        if cached is None:
            crashed: list[str] = []
            reads: list[Reads] = []
            cached = check_unit(unit, info, settings, module_text, crashed, reads)
            if crashed:
                failed.extend(crashed)
            elif reads:
                _remember(results, unit.text, reads[0], cached)
        if cached:
            out.extend(shift(d, unit.start_line - 1, path) for d in cached)
    lines = decoded.split("\n") if settings.sdk_generation else []
    for line, col, end_col, message in classic_on_new_sdk.check_lines(lines, settings.sdk_generation):
        out.append(Diagnostic(classic_on_new_sdk.CODE, "error", message, path, line, col, line, end_col, SOURCE,
                              doc_url(classic_on_new_sdk.CODE)))
    if failed:
        out.append(_info(path, f"internal error in NKI check(s) {', '.join(sorted(set(failed)))}; other checks ran",
                         "sim_python_exception"))
    return _dedupe(out)


# Per-function results, position-independent (lines relative to the function's first line): while the
# user types, only the function being edited is analysed again. Keyed by what the analysis reads: the
# context (settings, API generation), then the function's text, then what its analysis read of the
# module (each entry's ``Reads``: bindings looked up, the string lines if read), checked against the
# file's current module level: an edit elsewhere at module level leaves the entry valid.
_Entry = tuple[Reads, list[Diagnostic]]
_RESULTS: dict[tuple[Any, ...], dict[str, list[_Entry]]] = {}  # in least-recently-used order
_RESULTS_LOCK = threading.Lock()  # checks run in a thread pool
_RESULTS_MAX = 2048  # functions per context; a kernel file has tens
_ENTRIES_MAX = 4  # results kept per function text (under different bindings: a constant edited and undone)
_CONTEXTS_MAX = 16  # contexts kept at once: settings x API generations
# column-0 `NAME = "text"` lines: the part of the file outside a function that a rule may read (a task's
# TARGET = "trn3"); matched after a "\n" (a literal prefix scans ~10x faster than "^")
_MODULE_ASSIGN = re.compile(r"\n([A-Za-z_]\w*[ \t]*=[ \t]*[rRbBuUfF]{0,2}[\"'][^\n]*)")


def clear_caches() -> None:
    """Forget every cached parse and result (the next check is a cold one)."""
    with _RESULTS_LOCK:
        _RESULTS.clear()
    source.clear_cache()


def _results_for(context: tuple[Any, ...]) -> dict[str, list[_Entry]]:
    """The results of one context, the least recently used context making room."""
    with _RESULTS_LOCK:
        results = _RESULTS.pop(context, None)
        if results is None:
            results = {}
            while len(_RESULTS) >= _CONTEXTS_MAX:
                del _RESULTS[next(iter(_RESULTS))]
        _RESULTS[context] = results
        return results


def _lookup(results: dict[str, list[_Entry]], text: str, now: Now) -> list[Diagnostic] | None:
    """The cached diagnostics of the function ``text`` whose reads hold under the bindings ``now`` (that
    entry becomes the most recently used: a constant edited back and forth keeps both results)."""
    entries = results.get(text, ())
    for k, (reads, diags) in enumerate(entries):
        if reads.hold(now):
            if k:  # a new list, never an update in place: another check thread may be iterating the old one
                results[text] = [entries[k]] + [e for j, e in enumerate(entries) if j != k]
            return diags
    return None


def _remember(results: dict[str, list[_Entry]], key: str, reads: Reads, value: list[Diagnostic]) -> None:
    old = results.get(key)
    if old is None and len(results) >= _RESULTS_MAX:
        results.clear()
    # a new list, never an update in place: another check thread may be iterating the old one
    results[key] = [(reads, value)] + [e for e in old or () if e[0] != reads][:_ENTRIES_MAX - 1]


def _context_key(generation: str, settings: Settings) -> tuple[Any, ...]:
    shapes = tuple(sorted((k, tuple(sorted(v.items()))) for k, v in settings.input_shapes.items()))
    return (generation, settings.target, settings.sdk_generation, shapes)


def _warm_in_parallel(text: str, settings: Settings, module_text: str) -> None:
    """Let the helper process parse and analyse half of this check's new chunks (``parallel.py``)."""
    if parallel.new_chars(text) < parallel.MIN_CHARS:
        return  # the usual case while typing: one chunk changed
    ops = parallel.guess_ops(text)
    guess = parallel.info_of(ops)
    if not guess.generation:
        return
    results = _results_for(_context_key(guess.generation, settings))
    now = Now.of(guess.aliases, guess.constants, module_text)
    mine, theirs = parallel.split(text, lambda t: _lookup(results, t, now) is not None)
    _share(mine, theirs, ops, settings, module_text, results, chunks=True)


def _analyse_in_parallel(units: list[source.Unit], now: Now, settings: Settings, module_text: str,
                         results: dict[str, list[_Entry]]) -> None:
    """Share the analysis of many functions with the helper (after an edit changed what they read)."""
    todo = [u.text for u in units if u.text[:1] not in (" ", "\t", "\f") and _lookup(results, u.text, now) is None]
    if sum(map(len, todo)) >= parallel.MIN_CHARS:
        ops = parallel.ops_of(now.aliases, now.constants)
        _share(*parallel.halve(todo), ops, settings, module_text, results, chunks=False)


def _share(mine: list[str], theirs: list[str], ops: list[source.Op], settings: Settings, module_text: str,
           results: dict[str, list[_Entry]], chunks: bool) -> None:
    """``parallel.warm`` on ``mine`` here and on ``theirs`` in the helper; both halves go into the caches
    (chunk facts only when the texts are the file's chunks, not function texts)."""
    job = parallel.submit(theirs, ops, settings, module_text) if theirs else None
    if job is None:
        return  # helper busy or gone: the ordinary check does everything
    try:
        warmed = parallel.warm(mine, ops, settings, module_text)
        _store(warmed[0] if chunks else [], warmed[1], results)
    finally:
        reply = job.result()
    if reply is not None:
        _store(reply[0] if chunks else [], reply[1], results)


def _store(chunks: list[tuple[str, source.Chunk]], found: list[tuple[str, Reads, list[Diagnostic]]],
           results: dict[str, list[_Entry]]) -> None:
    for text, chunk in chunks:
        source.remember_chunk(text, chunk)
    for text, reads, diags in found:
        _remember(results, text, reads, diags)


def _dedupe(diags: list[Diagnostic]) -> list[Diagnostic]:
    seen: set[tuple[str, int, int]] = set()
    out = []
    for d in diags:
        key = (d.code, d.line, d.column)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out
