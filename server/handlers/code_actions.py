"""textDocument/codeAction: verified quick fixes, Explain error, Verify now, Fix kernel with agent.

Quick fixes are the ones ``diagnostics.fixes.verified_fixes`` re-checked for this exact revision
(applied, they remove their diagnostic and add none); they are offered as ``quickfix`` +
``isPreferred`` with a versioned workspace edit. If the last static result is older than the buffer
(a debounce is pending), the check is re-run first, so a fix never targets text that moved.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from lsprotocol import types as T

from .. import analysis
from ..convert import lsp_range, to_lsp_edit
from .commands import EXPLAIN, FIX_KERNEL, VERIFY

if TYPE_CHECKING:
    from ..app import NkiLanguageServer

KINDS = [T.CodeActionKind.QuickFix]
NKI_SOURCES = {analysis.STATIC_SOURCE, analysis.SIM_SOURCE, analysis.VERIFY_SOURCE, analysis.SERVER_SOURCE}


def _data(d: T.Diagnostic) -> dict[str, Any]:
    data = d.data
    if isinstance(data, dict):
        return data
    return {k: getattr(data, k) for k in ("tier", "index", "revision") if hasattr(data, k)} if data else {}


def register(ls: NkiLanguageServer) -> None:
    @ls.feature(T.TEXT_DOCUMENT_CODE_ACTION, T.CodeActionOptions(code_action_kinds=KINDS, resolve_provider=False))
    async def code_action(ls: NkiLanguageServer, params: T.CodeActionParams) -> list[T.CodeAction]:
        uri = params.text_document.uri
        snap = ls.state.store.get(uri)
        if snap is None or snap.too_large:
            return []
        st = ls.state.doc(uri)
        result = st.static
        if result is None or result.revision != snap.revision:
            settings = analysis.check_settings(ls.state.settings)
            result = await asyncio.get_running_loop().run_in_executor(ls.state.static_pool, analysis.static, snap,
                                                                      settings)
            if not ls.state.store.is_current(snap):
                return []
        lines = snap.text.split("\n")
        actions: list[T.CodeAction] = []
        explained: set[str] = set()
        for diag in params.context.diagnostics:
            if diag.source not in NKI_SOURCES:
                continue
            index = None
            data = _data(diag)
            if data.get("tier") == "static" and data.get("revision") == result.revision:
                index = data.get("index")
            elif diag.source == analysis.STATIC_SOURCE:  # no data: match by code and range
                for k, md in enumerate(result.diagnostics):
                    if md.code == diag.code and lsp_range(lines, md.line, md.column, md.end_line, md.end_column) == diag.range:
                        index = k
                        break
            if isinstance(index, int) and 0 <= index < len(result.diagnostics):
                fixes = await asyncio.get_running_loop().run_in_executor(
                    ls.state.static_pool, analysis.fixes_for, result, snap, analysis.check_settings(ls.state.settings),
                    index)
                for fix in fixes:
                    edit = T.WorkspaceEdit(document_changes=[T.TextDocumentEdit(
                        text_document=T.OptionalVersionedTextDocumentIdentifier(uri=uri, version=snap.version),
                        edits=[to_lsp_edit(e, lines) for e in fix.edits])])
                    actions.append(T.CodeAction(title=fix.title, kind=T.CodeActionKind.QuickFix, diagnostics=[diag],
                                                is_preferred=True, edit=edit))
            code = str(diag.code) if diag.code is not None else ""
            if code and code not in explained:
                explained.add(code)
                actions.append(T.CodeAction(title=f"Explain {code}", diagnostics=[diag],
                                            command=T.Command(title=f"Explain {code}", command=EXPLAIN, arguments=[code])))
        if ls.state.task_of(snap) is not None:
            actions.append(T.CodeAction(title="NKI: Verify now",
                                        command=T.Command(title="Verify now", command=VERIFY, arguments=[uri])))
        if any(d.source in NKI_SOURCES for d in params.context.diagnostics):
            actions.append(T.CodeAction(title="NKI: Fix kernel with agent",
                                        command=T.Command(title="Fix kernel with agent", command=FIX_KERNEL,
                                                          arguments=[uri])))
        return actions
