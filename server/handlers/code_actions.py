"""textDocument/codeAction: verified quick fixes, Explain error, Verify now, Fix kernel with agent.

Quick fixes are the ones ``diagnostics.fixes.verified_fixes`` re-checked for this exact revision
(applied, they remove their diagnostic and add none); they are offered as ``quickfix`` +
``isPreferred`` with a versioned workspace edit. If the last static result is older than the buffer
(a debounce is pending), the check is re-run first, so a fix never targets text that moved.
Diagnostics of the run tiers (``nki-sim``, ``nki-verify``) — and a static one that a run reported at
the same range — get the fixes the rules agent applies, each re-run in the sandbox first
(``server/run_fixes.py``). ``source.fixAll.nki`` (all static fixes at once, on save) is ``fix_all.py``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from lsprotocol import types as T

from ...diagnostics.model import Fix
from .. import analysis, run_fixes
from ..convert import lsp_range, to_lsp_edit
from . import fix_all
from .commands import EXPLAIN, FIX_KERNEL, VERIFY
from .input_shapes import actions as input_shape_actions

if TYPE_CHECKING:
    from ..app import NkiLanguageServer

KINDS = [T.CodeActionKind.QuickFix, fix_all.KIND]
NKI_SOURCES = {analysis.STATIC_SOURCE, analysis.SIM_SOURCE, analysis.VERIFY_SOURCE, analysis.SERVER_SOURCE}


def _data(d: T.Diagnostic) -> dict[str, Any]:
    data = d.data
    if isinstance(data, dict):
        return data
    return {k: getattr(data, k) for k in ("tier", "index", "revision") if hasattr(data, k)} if data else {}


def _runs_at(ls: NkiLanguageServer, snap: Any, lines: list[str], diag: T.Diagnostic) -> list[tuple[str, int]]:
    """(tier, index) of the run diagnostics of this revision with ``diag``'s code and LSP range."""
    out = []
    for kind in run_fixes.RUN_TIERS:
        run = run_fixes.run_of(ls.session, snap, kind)
        for k, md in enumerate(run.diagnostics if run is not None else ()):
            if md.code == diag.code and lsp_range(lines, md.line, md.column, md.end_line, md.end_column) == diag.range:
                out.append((kind, k))
    return out


def register(ls: NkiLanguageServer) -> None:
    @ls.feature(T.TEXT_DOCUMENT_CODE_ACTION, T.CodeActionOptions(code_action_kinds=KINDS, resolve_provider=False))
    async def code_action(ls: NkiLanguageServer, params: T.CodeActionParams) -> list[T.CodeAction]:
        uri = params.text_document.uri
        only = params.context.only
        if fix_all.source_only(only):  # on save: source.fixAll.nki, nothing else
            return await fix_all.action(ls, uri) if fix_all.requested(only) else []
        snap = ls.session.store.get(uri)
        if snap is None or snap.too_large:
            return []
        st = ls.session.doc(uri)
        result = st.static
        if result is None or result.revision != snap.revision:
            settings = await ls.session.check_settings_async(snap)
            result = await asyncio.get_running_loop().run_in_executor(ls.scheduler.static_pool, analysis.static, snap,
                                                                      settings)
            if not ls.session.store.is_current(snap):
                return []
        assert result is not None
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
            fixes: list[Fix] = []
            runs: list[tuple[str, int]] = []  # (run tier, index) of the run diagnostics this one stands for
            if isinstance(index, int) and 0 <= index < len(result.diagnostics):
                fixes = await asyncio.get_running_loop().run_in_executor(
                    ls.scheduler.static_pool, analysis.fixes_for, result, snap, await ls.session.check_settings_async(snap),
                    index)
                runs = run_fixes.matching(ls.session, snap, result.diagnostics[index])
            elif data.get("tier") in run_fixes.RUN_TIERS and data.get("revision") == snap.revision \
                    and isinstance(data.get("index"), int):
                runs = [(str(data["tier"]), data["index"])]
            elif diag.source in (analysis.SIM_SOURCE, analysis.VERIFY_SOURCE):  # no data: match by code and range
                runs = _runs_at(ls, snap, lines, diag)
            for kind, k in runs:
                fixes += [f for f in await run_fixes.run_fixes(ls, snap, kind, k)
                          if f.edits not in {g.edits for g in fixes}]
            if not ls.session.store.is_current(snap):
                return []  # the text moved while the fixes were checked: none of them is for it
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
        if await ls.session.task(snap) is not None:
            actions.append(T.CodeAction(title="NKI: Verify now",
                                        command=T.Command(title="Verify now", command=VERIFY, arguments=[uri])))
        if any(d.source in NKI_SOURCES for d in params.context.diagnostics):
            actions.append(T.CodeAction(title="NKI: Fix kernel with agent",
                                        command=T.Command(title="Fix kernel with agent", command=FIX_KERNEL,
                                                          arguments=[uri])))
        actions.extend(await input_shape_actions(ls, uri, params))
        if fix_all.requested(only):
            actions.extend(await fix_all.action(ls, uri))
        return actions
