"""The error catalog: every id a diagnostic can carry, explained in our own words with a fix and a doc link.

Covers the documented NKI ``err_*`` ids (36 + 2 historical), our simulator ``sim_*`` ids (from
``toolchain.errors``), the documented ``NCC_E*`` compiler codes and the backend codes seen in real
outputs (``NCC_I*``, old ``[TEN404]``-style codes, driver ``F13x``, runtime ``NRT_*``), plus the ids
our log parsers use (``nki_*``, ``log_*``). The data lives in ``catalog.json`` (front end) and
``catalog_backend.json`` (backend and runtime), shipped as package data; this module derives the
doc links that follow a pattern and answers look-ups.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from nki_agent.toolchain.facts import errors as tc_errors

# The NCC error-code pages exist only on "latest" (added after SDK 2.27); one page per code.
NCC_DOCS = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/compiler/error-codes"
# Undocumented backend codes link to the index, the closest official page.
NCC_INDEX = f"{NCC_DOCS}/index.html"
# Runtime status codes: pinned copy of the nrt_status.h reference page.
NRT_STATUS = "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.29.0/neuron-runtime/api/nrt_status.html"
# Known-issues page of the classic front end (removed in SDK 2.27): pinned.
KNOWN_ISSUES = "https://awsdocs-neuron.readthedocs-hosted.com/en/v2.26.1/nki/about/nki_known_issues.html"
# What to collect when the compiler itself is at fault.
REPRO_HINT = ("report it at https://github.com/aws-neuron/aws-neuron-sdk/issues "
              "with a repro bundle (the kernel, the exact neuronx-cc command line, log-neuron-cc.txt and the compiler "
              "work directory; rerun with XLA_IR_DEBUG=1 XLA_HLO_DEBUG=1 and --pipeline compile SaveTemps to keep it)")

_DATA_FILES = ("catalog.json", "catalog_backend.json")
_DOCUMENTED_NCC = re.compile(r"^NCC_E[A-Z]{3,4}\d{3}$")
_OLD_CODE = re.compile(r"^[A-Z]{3}\d{3}$")


@dataclass(frozen=True)
class Entry:
    """One catalog entry; ``not_your_bug`` marks internal compiler errors."""

    code: str
    title: str
    explanation: str
    fix: str
    doc_url: str
    category: str
    not_your_bug: bool = False
    severity: str = "error"
    aliases: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["aliases"] = list(self.aliases)
        if self.not_your_bug:
            d["report"] = REPRO_HINT
        return d


def _category(code: str, raw: dict[str, Any]) -> str:
    if "category" in raw:
        return str(raw["category"])
    if code.startswith("NRT_"):
        return "runtime"
    if re.fullmatch(r"F1\d\d", code):
        return "driver"
    if raw.get("not_your_bug"):
        return "internal"
    return "compiler"


def _doc_url(code: str, raw: dict[str, Any]) -> str:
    if raw.get("doc_url"):
        return str(raw["doc_url"])
    if code in tc_errors.DOCUMENTED or code in tc_errors.SIMULATOR or code.startswith("err_"):
        if code.startswith("err_") and code not in tc_errors.SIMULATOR:
            return f"{tc_errors.ERRORS_PAGE}#{code.replace('_', '-')}"
        return tc_errors.doc_url(code)
    if _DOCUMENTED_NCC.match(code):
        return f"{NCC_DOCS}/{code[4:]}.html"
    if code.startswith("NRT_"):
        return NRT_STATUS
    if code in ("NKI005", "GCA046"):
        return KNOWN_ISSUES
    return NCC_INDEX


@lru_cache(maxsize=1)
def entries() -> dict[str, Entry]:
    """All entries by canonical code (loaded once from the package data)."""
    out: dict[str, Entry] = {}
    pkg = resources.files(__package__ or "nki_agent.diagnostics")
    for name in _DATA_FILES:
        data = json.loads(pkg.joinpath(name).read_text(encoding="utf-8"))
        for code, raw in data.items():
            if code.startswith("_"):
                continue
            out[code] = Entry(code=code, title=str(raw["title"]), explanation=str(raw["explanation"]),
                              fix=str(raw["fix"]), doc_url=_doc_url(code, raw), category=_category(code, raw),
                              not_your_bug=bool(raw.get("not_your_bug", False)),
                              severity=str(raw.get("severity", "error")),
                              aliases=tuple(raw.get("aliases", ())))
    return out


def normalize(code: str) -> str:
    """Canonical spelling of a user-typed code: '[TEN404]', 'ncc_evrf059', 'EVRF059', 'err-foo-bar', '#err-x'."""
    c = code.strip().strip("[]#").strip()
    if not c:
        return c
    known = entries()
    if c in known:
        return c
    low = c.lower().replace("-", "_")
    if low in known:
        return low
    up = c.upper().replace("-", "_")
    if up in known:
        return up
    if not up.startswith("NCC_") and f"NCC_{up}" in known:
        return f"NCC_{up}"
    if up.startswith("NCC_") and up[4:] in known and _OLD_CODE.match(up[4:]):
        return up[4:]
    return c


def lookup(code: str) -> Entry | None:
    """The entry for ``code`` in any common spelling, or None."""
    return entries().get(normalize(code))


def doc_url(code: str) -> str:
    """Doc link for any code (catalog first, then the toolchain's rule)."""
    e = lookup(code)
    return e.doc_url if e else tc_errors.doc_url(code)


def title(code: str) -> str:
    e = lookup(code)
    return e.title if e else tc_errors.title(code)


def is_internal(code: str) -> bool:
    """True when the code marks a compiler bug rather than a problem in the user's kernel."""
    e = lookup(code)
    if e is not None:
        return e.not_your_bug
    return bool(re.fullmatch(r"NCC_I[A-Z]{2,5}\d{3}", code))


__all__ = ["REPRO_HINT", "Entry", "doc_url", "entries", "is_internal", "lookup", "normalize", "title"]
