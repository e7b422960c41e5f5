"""``source.fixAll.nki``: every verified quick fix of a document as ONE code action (``editor.codeActionsOnSave``).

The fixes are the static tier's quick fixes (``diagnostics.fixes.fix_all``: each re-checked, applied together
only when the whole file then re-checks with fewer findings and no code more often) of what the user sees —
``# nki: ignore`` comments and ``nkiAgent.severity: off`` hide a finding from fix-all as from the editor. The
edit is pinned to the document version it was computed for; a document that changed meanwhile gets none.
Run-tier fixes (``nki-sim`` / ``nki-verify``) need a sandbox re-run each and stay single quick fixes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lsprotocol import types as T

from ...diagnostics import suppress
from ...diagnostics.ast_edit import diff_edits
from ...diagnostics.fixes import fix_all
from ...diagnostics.static import check_text
from ..convert import to_lsp_edit

if TYPE_CHECKING:
    from ..app import NkiLanguageServer

KIND = "source.fixAll.nki"
TITLE = "NKI: Fix all auto-fixable problems"


def _kinds(only: Sequence[str] | None) -> list[str]:
    return [str(getattr(k, "value", k)) for k in only or ()]  # lsprotocol parses known kinds into its enum


def requested(only: Sequence[str] | None) -> bool:
    """Whether a request's ``context.only`` asks for this kind (``source``, ``source.fixAll`` or ours)."""
    return any(KIND == k or KIND.startswith(k + ".") for k in _kinds(only))


def source_only(only: Sequence[str] | None) -> bool:
    """Whether a request asks for source actions only (on save): no quick fixes, no commands."""
    kinds = _kinds(only)
    return bool(kinds) and all(k == "source" or k.startswith("source.") for k in kinds)


async def action(ls: NkiLanguageServer, uri: str) -> list[T.CodeAction]:
    """The fix-all action of ``uri``'s current version (none when nothing is fixable)."""
    snap = ls.session.store.get(uri)
    if snap is None or snap.too_large:
        return []
    settings, severity = await ls.session.check_settings_async(snap), dict(ls.session.settings.severity)
    fixed, applied = await asyncio.get_running_loop().run_in_executor(
        ls.scheduler.static_pool, fix_all, snap.path, snap.text,
        lambda p, t: suppress.apply(check_text(p, t, settings), t, p, severity))
    if not applied or not ls.session.store.is_current(snap):
        return []
    lines = snap.text.split("\n")
    edit = T.WorkspaceEdit(document_changes=[T.TextDocumentEdit(
        text_document=T.OptionalVersionedTextDocumentIdentifier(uri=uri, version=snap.version),
        edits=[to_lsp_edit(e, lines) for e in diff_edits(snap.text, fixed)])])
    return [T.CodeAction(title=f"{TITLE} ({len(applied)})", kind=KIND, edit=edit)]
