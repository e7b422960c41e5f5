"""textDocument/codeLens: the lenses of ``diagnostics.views.lens`` (the last verification or what a task-less
save ran, the cost model's estimate, the runner's verdict) as LSP lenses running ``nki.verify``; the title is
short, the full text is the command's tooltip."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from lsprotocol import types as T

from ...diagnostics.views import lens
from .. import analysis
from ..positions import to_lsp
from ..views import document_view
from .commands import VERIFY

if TYPE_CHECKING:
    from ..app import NkiLanguageServer


def register(ls: NkiLanguageServer) -> None:
    @ls.feature(T.TEXT_DOCUMENT_CODE_LENS)
    async def code_lens(ls: NkiLanguageServer, params: T.CodeLensParams) -> list[T.CodeLens]:
        snap = ls.session.store.get(params.text_document.uri)
        if snap is None or snap.too_large:
            return []
        view = await document_view(ls, snap)
        task = await ls.session.task(snap)
        found = await ls.session.taskless_facts(snap) if task is None else None
        named: tuple[str, ...] = ()
        if task is not None and "verify" not in view.runs and "simulate" not in view.runs:  # reads the task file
            named = await asyncio.get_running_loop().run_in_executor(ls.session.pool, analysis.task_kernels,
                                                                     snap.text, task)
        lines = view.lines
        out = []
        for item in lens.lenses(view, ls.session.settings.compiler_backend, task is not None, named, found):
            pl, pc = to_lsp(lines, item.line, 1)
            out.append(T.CodeLens(range=T.Range(T.Position(pl, 0), T.Position(pl, pc)), command=T.Command(
                title=item.title, command=VERIFY, arguments=[snap.uri],
                tooltip=item.tooltip if item.tooltip != item.title else None)))
        return out
