"""The bridge from the session to the pure views (``diagnostics/views``): a frozen ``DocumentView`` of one
open document, built on the event loop from what the session holds (facts and the task's target are
computed in the static pool, never on the loop)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..diagnostics.views.context import DocumentView
from ..diagnostics.views.hover import shown_target
from .documents import Snapshot

if TYPE_CHECKING:
    from .app import NkiLanguageServer


async def document_view(ls: NkiLanguageServer, snap: Snapshot, diagnostics: bool = False) -> DocumentView:
    """``snap`` and what is known about it under the current settings; ``diagnostics``: with what is published
    for it (hover explains the codes under the cursor)."""
    session = ls.session
    facts = await session.facts(snap)
    task_target = await asyncio.get_running_loop().run_in_executor(session.pool, session.task_target, snap)
    st = session.docs.get(snap.uri)
    runs = dict(st.runs) if st is not None else {}
    shown = [d for _tier, _k, d in ls.publisher.current_diagnostics(snap.uri)[1]] if diagnostics else []
    return DocumentView(text=snap.text, revision=snap.revision, facts=facts,
                        target=shown_target(runs, session.settings.target, task_target, snap.text), runs=runs,
                        cost=session.cost_view(snap), diagnostics=shown,
                        input_shapes=session.input_shapes(snap, facts))
