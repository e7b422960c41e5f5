"""SARIF 2.1.0 rendering of diagnostics (for CI code-scanning uploads): rules from the catalog, one result each."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..diagnostics import catalog
from ..diagnostics.model import Diagnostic

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
# SARIF has no "info"/"hint" levels: both are "note".
_LEVEL = {"error": "error", "warning": "warning", "info": "note", "hint": "note"}
_PLACEHOLDER = ("<output>",)  # not a file: such results carry no physical location


def _rule(code: str, url: str) -> dict[str, Any]:
    e = catalog.lookup(code)
    rule: dict[str, Any] = {"id": code, "helpUri": e.doc_url if e else url}
    if e is not None:
        rule["name"] = e.code
        rule["shortDescription"] = {"text": e.title}
        rule["fullDescription"] = {"text": e.explanation}
        rule["help"] = {"text": f"{e.explanation}\nFix: {e.fix}"}
        rule["properties"] = {"category": e.category, "notYourBug": e.not_your_bug}
    return rule


def _location(path: str, line: int, column: int, end_line: int | None = None,
              end_column: int | None = None) -> dict[str, Any]:
    region: dict[str, Any] = {"startLine": max(1, line), "startColumn": max(1, column)}
    if end_line is not None:
        region["endLine"] = max(region["startLine"], end_line)
    if end_column is not None:
        region["endColumn"] = max(1, end_column)
    return {"physicalLocation": {"artifactLocation": {"uri": path.replace("\\", "/")}, "region": region}}


def to_sarif(diagnostics: Iterable[Diagnostic], tool_version: str = "0.1.0") -> dict[str, Any]:
    """A SARIF log with one run of nki-agent."""
    diags = list(diagnostics)
    rules: dict[str, dict[str, Any]] = {}
    for d in diags:
        rules.setdefault(d.code, _rule(d.code, d.doc_url))
    index = {code: i for i, code in enumerate(rules)}
    results = []
    for d in diags:
        res: dict[str, Any] = {"ruleId": d.code, "ruleIndex": index[d.code], "level": _LEVEL.get(d.severity, "none"),
                               "message": {"text": d.message}}
        if d.path not in _PLACEHOLDER:
            res["locations"] = [_location(d.path, d.line, d.column, d.end_line, d.end_column)]
        if d.related:
            res["relatedLocations"] = [dict(_location(r.path, r.line, r.column), id=i, message={"text": r.message})
                                       for i, r in enumerate(d.related)]
        res["properties"] = {"source": d.source, "notYourBug": d.not_your_bug, "helpUri": d.doc_url}
        results.append(res)
    driver = {"name": "nki-agent", "version": tool_version,
              "rules": list(rules.values())}
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": [{"tool": {"driver": driver}, "results": results}]}
