"""The one diagnostic model every source produces (simulator, compiler-output parser, static checks).

Plain data with 1-based lines and columns; the language server converts it to LSP types, the CLI to
text, JSON or SARIF. Nothing here knows about LSP.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nki_agent.toolchain.facts.errors import Problem, doc_url

SEVERITIES = ("error", "warning", "info", "hint")


@dataclass(frozen=True)
class RelatedInfo:
    path: str
    line: int
    column: int
    message: str


@dataclass(frozen=True)
class TextEdit:
    """Replace the 1-based [line:column, end_line:end_column) span with ``new_text``."""

    line: int
    column: int
    end_line: int
    end_column: int
    new_text: str


@dataclass(frozen=True)
class Fix:
    title: str
    edits: tuple[TextEdit, ...]


@dataclass(frozen=True)
class Diagnostic:
    code: str
    severity: str
    message: str
    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    source: str
    doc_url: str
    related: tuple[RelatedInfo, ...] = field(default_factory=tuple)
    fixes: tuple[Fix, ...] = field(default_factory=tuple)
    not_your_bug: bool = False  # an internal compiler error: the kernel is not at fault

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code, "severity": self.severity, "message": self.message, "path": self.path,
            "line": self.line, "column": self.column, "end_line": self.end_line, "end_column": self.end_column,
            "source": self.source, "doc_url": self.doc_url,
            "related": [r.__dict__ for r in self.related],
            "fixes": [{"title": f.title, "edits": [e.__dict__ for e in f.edits]} for f in self.fixes],
            "not_your_bug": self.not_your_bug,
        }


def from_problem(p: Problem, source: str, default_path: str = "") -> Diagnostic:
    """A toolchain Problem as a Diagnostic (no location -> line 1 of ``default_path``)."""
    loc = p.location
    path = loc.path if loc else default_path
    line = loc.line if loc else 1
    col = loc.column if loc else 1
    end_line = (loc.end_line or line) if loc else line
    end_col = (loc.end_column or col) if loc else col
    if end_line == line and end_col <= col:
        end_col = col + 1
    related = tuple(RelatedInfo(r.location.path, r.location.line, r.location.column, r.message) for r in p.related)
    sev = p.severity if p.severity in SEVERITIES else "error"
    return Diagnostic(p.code, sev, p.message, path, line, col, end_line, end_col, source, doc_url(p.code), related)


def dedupe(tagged: list[tuple[str, int, Diagnostic]]) -> list[tuple[str, int, Diagnostic]]:
    """One diagnostic per (id, path, range): two tiers reporting the same problem at the same place (the
    static check and the simulator) are published once — the first in tier order, with the fixes of both. The
    first run tier's message and related information replace the static check's: the run saw the values (the
    tile's name, where it was made)."""
    seen: dict[tuple[str, str, int, int, int, int], int] = {}
    out: list[tuple[str, int, Diagnostic]] = []
    worded: set[tuple[str, str, int, int, int, int]] = set()
    for tier, k, d in tagged:
        key = (d.code, d.path, d.line, d.column, d.end_line, d.end_column)
        at = seen.get(key)
        if at is None:
            seen[key] = len(out)
            out.append((tier, k, d))
            continue
        first = out[at][2]
        extra = tuple(f for f in d.fixes if f.title not in {g.title for g in first.fixes})
        better = out[at][0] == "static" and tier != "static" and key not in worded
        if better:
            worded.add(key)
        if extra or better:
            from dataclasses import replace

            merged = replace(first, fixes=first.fixes + extra)
            if better:
                merged = replace(merged, message=d.message, related=d.related or first.related)
            out[at] = (out[at][0], out[at][1], merged)
    return out

