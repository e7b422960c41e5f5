"""The offline ``rules`` backend: deterministic quick fixes instead of a model (no key, no network).

It speaks the same protocol as the LLM backends, so the same loop, budgets, trajectories and editor
flow apply. Each turn it looks at the loop's ``Workspace`` (current candidate + last diagnostics) and
calls ``verify`` with the next fix it has not tried yet: the static rules' quick fixes that survive
a re-check (``diagnostics.fixes.verified_fixes``), then the fixes for problems only a run finds
(``diagnostics.sim_fixes``). With no candidate left it ends the turn and says which codes it could
not fix, so the router can escalate to a model.
"""

from __future__ import annotations

import hashlib
import json

from ...diagnostics.fixes import apply_edits, verified_fixes
from ...diagnostics.model import Diagnostic, Fix
from ...diagnostics.sim_fixes import fixes_for, migrate_to_new_api
from ...diagnostics.static import Settings, check_text
from ..protocol import BackendError, ModelReply, ModelRequest, ToolCall, Usage, Workspace


class RulesBackend:
    name = "rules"
    model = "rules"

    def complete(self, request: ModelRequest) -> ModelReply:
        if request.cancel is not None and request.cancel.is_set():
            raise BackendError("cancelled", "cancelled")
        ws = request.workspace
        if ws is None:
            return _text("The rules backend needs the loop's workspace; nothing to do.")
        if ws.verified:
            return _text("The kernel verifies; done.")
        tried = _submitted(request)
        if not ws.diagnostics and not tried:
            return _call(len(request.messages), "verify", {}, "Verifying the kernel as it is.")
        # fixes on top of the current candidate first; then fixes of the user's original (backtracking
        # when an earlier fix led nowhere)
        options = self.candidates(ws)
        if ws.original and ws.original != ws.code:
            back = Workspace(ws.original, ws.path, ws.task, list(ws.original_diagnostics), False, ws.target,
                             ws.sdk_generation)
            options += [(f"{title}, on the original kernel", text) for title, text in self.candidates(back)]
        for title, fixed in options:
            key = _key(fixed)
            if fixed == ws.code or key in tried:
                continue
            return _call(len(request.messages), "verify", {"code": fixed}, f"Applying quick fix: {title}.")
        codes = sorted({d.code for d in ws.diagnostics if d.severity == "error"}) or ["(none)"]
        return _text(f"No deterministic fix applies to {', '.join(codes)}; a model is needed.")

    def candidates(self, ws: Workspace) -> list[tuple[str, str]]:
        """(title, fixed text) of every fix to try, most specific first."""
        settings = Settings(target=ws.target or "trn1", sdk_generation=ws.sdk_generation)

        def check(path: str, text: str) -> list[Diagnostic]:
            return check_text(path, text, settings)

        out: list[tuple[str, str]] = []
        static = check(ws.path, ws.code)
        for k, fixes in sorted(verified_fixes(ws.path, ws.code, static, check).items()):
            out.extend((f"{f.title} ({static[k].code}, line {static[k].line})", _apply(ws.code, f)) for f in fixes)
        if any(d.code == "sim_removed_api" and "classic NKI API" in d.message for d in static):
            out.extend((f"{f.title} (classic API on a new-only SDK)", _apply(ws.code, f))
                       for f in migrate_to_new_api(ws.code))
        for d in ws.diagnostics:
            for f in fixes_for(d, ws.code, ws.path):
                out.append((f"{f.title} ({d.code}, line {d.line})", _apply(ws.code, f)))
        seen: set[str] = set()
        unique = []
        for title, text in out:
            if text and text not in seen:
                seen.add(text)
                unique.append((title, text))
        return unique


def _apply(text: str, fix: Fix) -> str:
    try:
        return apply_edits(text, fix.edits)
    except ValueError:
        return ""


def _key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _submitted(request: ModelRequest) -> set[str]:
    """Hashes of the candidates this backend already sent in this conversation (never retry one)."""
    out = set()
    for m in request.messages:
        for c in m.tool_calls:
            code = c.arguments.get("code") if isinstance(c.arguments, dict) else None
            if isinstance(code, str):
                out.add(_key(code))
            else:
                out.add("<current>")
    return out


def _text(text: str) -> ModelReply:
    return ModelReply(text=text, tool_calls=[], stop_reason="end_turn", usage=Usage(), model="rules")


def _call(n: int, tool: str, args: dict[str, object], text: str) -> ModelReply:
    cid = f"rules_{n}_{hashlib.sha1(json.dumps(args, sort_keys=True).encode()).hexdigest()[:8]}"
    return ModelReply(text=text, tool_calls=[ToolCall(cid, tool, dict(args))], stop_reason="tool_use", usage=Usage(),
                      model="rules")
