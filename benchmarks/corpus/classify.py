"""Outcome classification: turn a finished subprocess (exit status, stdout, stderr) into a ``Result``.

Owns the output patterns (pass/fail markers, NKI error codes, exception and traceback lines, pytest
summaries), ``classify`` and its success / failure branches, and the helpers that name what went
wrong (missing API or module, crash site). Pure text processing: nothing here runs anything.
"""

from __future__ import annotations

import re
from pathlib import Path

from manifest import Plan, Result

# NKI error ids that mean "the simulator does not model this API".
UNSUPPORTED_CODES = {"sim_unsupported_api", "sim_removed_api"}

# Output that means a reference check failed (a script that exits 0 but says so is a mismatch).
FAIL_MARKERS = re.compile(
    r"(\bdiffer\b|\bdiffers\b|\bmismatch|\bdo(?:es)? not match|\bdon't match|\btest failed\b|"
    r"\bnot (?:all)?close\b|\bincorrect\b|\bFAIL(?:ED)?\b|\bwrong\b)",
    re.IGNORECASE,
)
# Output that means a check passed (a script without a reference check that prints none of these just "ran").
PASS_MARKERS = re.compile(
    r"(\bmatch(?:es)?\b|\btest passed\b|\bpassed\b|\bcorrect\b|\bPASS\b|\bsuccess|CORPUS_CHECK: PASS)",
    re.IGNORECASE,
)
# An NKI error as the simulator prints it: optional "file.py:LINE:", then "[err_*|sim_*] message".
NKI_CODE = re.compile(
    r"(?:(?P<path>[^\s:\"']+\.py):(?P<line>\d+):\s*)?\[(?P<code>(?:err|sim)_[a-z0-9_]+)\]\s*(?P<msg>[^\n]*)"
)
# A traceback's final "Type: message" line (also pytest's "E   Type: message").
EXC_LINE = re.compile(
    r"^(?:E\s+)?(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|NotImplemented\w*|Warning))"
    r"(?::\s?(?P<msg>.*))?$"
)
# pytest's -rfE short summary line: "FAILED node - Type: message".
PYTEST_SUMMARY = re.compile(r"^(?:FAILED|ERROR) (?P<node>\S+)(?: - (?P<rest>.*))?$")
# A traceback frame: CPython's 'File "...", line N, in fn' or pytest --tb=short's 'path.py:N: in fn'.
FRAME = re.compile(r'^\s*(?:File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)'
                   r'|(?P<spath>\S+\.py):(?P<sline>\d+): in (?P<sfn>\S+))')


def short_api(name: str) -> str:
    """Normalise module paths to the usual aliases (``neuronxcc.nki.isa.x`` -> ``nisa.x``)."""
    name = name.strip().strip("'\"")
    for prefix, alias in (("neuronxcc.nki.language", "nl"), ("nki.language", "nl"),
                          ("neuronxcc.nki.isa", "nisa"), ("nki.isa", "nisa"),
                          ("neuronxcc.nki.compiler", "ncc"), ("nki.compiler", "ncc"),
                          ("neuronxcc.nki", "nki"), ("nki", "nki")):
        if name == prefix:
            return alias
        if name.startswith(prefix + "."):
            return alias + name[len(prefix):]
    return name


def is_nki_module(name: str) -> bool:
    return name.split(".")[0] in {"nki", "neuronxcc", "nki_cpu_simulator"}


def last_exception(text: str) -> tuple[str, str]:
    """The last ``Type: message`` line of a traceback (or pytest ``E`` line)."""
    found = ("", "")
    for line in text.splitlines():
        m = EXC_LINE.match(line.rstrip())
        if m and not line.startswith(" "):
            found = (m.group("type"), (m.group("msg") or "").strip())
        elif line.startswith("E ") and m:
            found = (m.group("type"), (m.group("msg") or "").strip())
    return found


def pytest_failure(text: str) -> tuple[str, str, str]:
    """(node, exc type, message) of the first FAILED/ERROR line in pytest's short summary."""
    for line in text.splitlines():
        m = PYTEST_SUMMARY.match(line.strip())
        if m:
            rest = m.group("rest") or ""
            em = EXC_LINE.match(rest)
            if em:
                return m.group("node"), em.group("type"), (em.group("msg") or "").strip()
            return m.group("node"), "", rest
    return "", "", ""


def pytest_counts(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in reversed(text.splitlines()):
        if re.search(r"\b(passed|failed|error|errors|skipped|deselected|no tests ran)\b", line) and (
                " in " in line or line.startswith("=")):
            for n, what in re.findall(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed)", line):
                counts[what.rstrip("s") if what.startswith("error") else what] = int(n)
            if counts:
                break
    return counts


def innermost_frame(text: str, tmp: Path) -> tuple[str, str]:
    """(site, 'file:line') of the innermost traceback frame; site is simulator/corpus/other."""
    frames = [m for m in (FRAME.match(line) for line in text.splitlines()) if m]
    if not frames:
        return "", ""
    m = frames[-1]
    path = m.group("path") or m.group("spath")
    line, fn = m.group("line") or m.group("sline"), m.group("fn") or m.group("sfn")
    where = f"{path.replace(str(tmp) + '/', '')}:{line} in {fn}"
    if "nki_agent" in path or "/toolchain/" in path:
        return "simulator", where
    if path.startswith(str(tmp)):
        return "corpus", where
    return "library", where


def assertion_is_check(text: str) -> bool:
    """Whether an AssertionError comes from a reference comparison (vs. an assert inside a kernel)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("AssertionError") or line.startswith("E   AssertionError") or "AssertionError" in line:
            ctx = "\n".join(lines[max(0, i - 6): i + 3])
            if re.search(r"allclose|array_equal|assert_equal|isclose|Not equal|Mismatch|is not true|"
                         r"assertTrue|assertEqual|testing|max_diff|tolerance|match|==", ctx):
                return True
    return False


def classify(plan: Plan, rc: int | None, out: str, err: str, timed_out: bool, tmp: Path) -> Result:
    """Turn a finished subprocess into an outcome."""
    text = out + "\n" + err
    res = Result(repo="", commit="", path="", api="", entry_kind=plan.entry_kind, entry=plan.entry,
                 check=plan.check, outcome="crash")
    is_pytest = "pytest" in plan.command[:2]
    if is_pytest:
        res.tests = pytest_counts(out)
    if timed_out:
        res.outcome, res.detail = "timeout", "subprocess timed out"
        return res
    nki = [m for m in NKI_CODE.finditer(text)]
    if rc == 0:
        return classify_success(plan, res, out, is_pytest, nki)
    if is_pytest and rc == 5:
        res.outcome, res.detail = "no_entry", "pytest collected no tests (after marker selection)"
        return res
    if is_pytest and rc == 4 and "while loading conftest" not in text:
        res.outcome, res.detail = "crash", "pytest usage error: " + first_line_matching(text, r"error:")
        res.crash_site = "harness"
        return res
    if not is_pytest and plan.check in ("harness", "self", "test") and re.search(
            r"\btests? passed\b|CORPUS_CHECK: PASS", out, re.I):  # "Test passed", "All tests passed"
        res.outcome = "pass"
        etype, emsg = last_exception(err)
        res.post_check_error = f"{etype}: {emsg}".strip(": ")
        res.detail = "reference check passed; failed afterwards (benchmark/profiling code)"
        return res
    res.returncode = rc
    return classify_failure(res, text, err if not is_pytest else text, nki, is_pytest, tmp)


def first_line_matching(text: str, pattern: str) -> str:
    for line in text.splitlines():
        if re.search(pattern, line):
            return line.strip()[:300]
    return ""


def classify_success(plan: Plan, res: Result, out: str, is_pytest: bool, nki: list[re.Match[str]]) -> Result:
    if is_pytest:
        if res.tests.get("passed", 0) == 0:
            res.outcome, res.detail = "no_entry", "no test passed (all skipped/deselected)"
        else:
            res.outcome, res.detail = "pass", f"{res.tests.get('passed', 0)} test(s) passed"
        return res
    fail = FAIL_MARKERS.search(out)
    if fail:
        res.outcome, res.detail = "mismatch", f"output says: {line_of(out, fail.start())}"
        return res
    if plan.check == "none" and not PASS_MARKERS.search(out):
        res.outcome, res.detail = "ran", "ran to completion; the file has no reference check"
        return res
    res.outcome, res.detail = "pass", "ran; reference check passed"
    return res


def line_of(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start: end if end >= 0 else len(text)].strip()[:200]


def classify_failure(
    res: Result, text: str, tb_text: str, nki: list[re.Match[str]], is_pytest: bool, tmp: Path
) -> Result:
    node, etype, emsg = pytest_failure(text) if is_pytest else ("", "", "")
    if not etype:
        etype, emsg = last_exception(tb_text)
    res.exception = f"{etype}: {emsg}"[:400] if etype else None
    site, where = innermost_frame(tb_text, tmp)
    if nki:
        m = nki[-1]
        code = m.group("code")
        res.nki_code, res.nki_message = code, m.group("msg").strip()[:400]
        res.nki_line = f"{m.group('path').replace(str(tmp) + '/', '')}:{m.group('line')}" if m.group("path") else None
        if code in UNSUPPORTED_CODES:
            res.outcome = "unsupported"
            res.missing_api = api_from_message(res.nki_message)
        elif code == "sim_timeout":
            res.outcome = "timeout"
        else:
            res.outcome = "sim_error"
            if code == "sim_python_exception":  # where did the wrapped Python exception come from?
                inner = tb_text.split("The above exception was the direct cause")[0]
                res.crash_site, where = innermost_frame(inner, tmp)
                res.detail_where = where
        res.detail = f"[{code}] {res.nki_message}"
        return res
    if etype.endswith(("ModuleNotFoundError", "ImportError")):
        mod = module_from_message(emsg)
        if is_nki_module(mod):
            res.outcome, res.missing_api = "unsupported", short_api(mod)
        else:
            res.outcome, res.missing_module = "import_error", mod.split(".")[0] if mod else emsg[:80]
        res.detail = f"{etype}: {emsg}"[:300]
        return res
    if etype.endswith("AttributeError"):
        m = re.search(r"module '([\w.]+)' has no attribute '(\w+)'", emsg)
        if m and is_nki_module(m.group(1)):
            res.outcome, res.missing_api = "unsupported", short_api(f"{m.group(1)}.{m.group(2)}")
            res.detail = f"{etype}: {emsg}"[:300]
            return res
    if etype.endswith("NotImplementedError"):
        res.outcome, res.missing_api = "unsupported", api_from_message(emsg) or emsg[:80]
        res.detail = f"{etype}: {emsg}"[:300]
        return res
    if etype.endswith("AssertionError") and assertion_is_check(tb_text):
        res.outcome, res.detail = "mismatch", f"{node + ': ' if node else ''}{etype}: {emsg}"[:300]
        return res
    if not etype and FAIL_MARKERS.search(text) and not is_pytest:
        res.outcome, res.detail = "mismatch", "output says: " + line_of(text, FAIL_MARKERS.search(text).start())
        return res
    res.outcome = "crash"
    res.crash_site = site or None
    res.detail = (f"{etype}: {emsg}" if etype else "non-zero exit " + str(res.returncode)) + (
        f" @ {where}" if where else "")
    res.detail = res.detail[:400]
    return res


def module_from_message(msg: str) -> str:
    m = re.search(r"No module named '([\w.]+)'", msg) or re.search(r"cannot import name '(\w+)' from '([\w.]+)'", msg)
    if not m:
        return ""
    if m.re.pattern.startswith("cannot"):
        return f"{m.group(2)}.{m.group(1)}"
    return m.group(1)


def api_from_message(msg: str | None) -> str | None:
    if not msg:
        return None
    m = re.search(r"\b((?:nl|nisa|ncc|nki|ncoll|neuronxcc\.nki|nki\.\w+)\.[\w.]+)", msg)
    if m:
        return short_api(m.group(1))
    m = re.search(r"'([\w.]+)'", msg)
    return short_api(m.group(1)) if m else msg[:60]
