"""textDocument/codeLens: the lenses of ``diagnostics.views.lens`` (the last verification or what a task-less
save ran, the cost model's estimate, the runner's verdict) as LSP lenses running ``nki.verify``; the title is
short, the full text is the command's tooltip. Then, on the same lines, the runnable lenses of
``diagnostics.views.runnables`` (▶ Simulate / Verify / Profile over every kernel, ▶ Run __main__ over its
driver), running the commands of ``runnables.py``."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from lsprotocol import types as T

from ...diagnostics.views import lens, runnables
from .. import analysis
from ..positions import to_lsp
from ..views import document_view
from .commands import VERIFY
from .runnables import PROFILE, SIMULATE

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
        found = await ls.session.taskless_facts(snap)
        named: tuple[str, ...] = ()
        if task is not None:  # reads the task file
            named = await asyncio.get_running_loop().run_in_executor(ls.session.pool, analysis.task_kernels,
                                                                     snap.text, task)
        lines = view.lines
        out = []

        def at(line: int, title: str, command: str, args: list[Any], tooltip: str) -> None:
            pl, pc = to_lsp(lines, line, 1)
            out.append(T.CodeLens(range=T.Range(T.Position(pl, 0), T.Position(pl, pc)), command=T.Command(
                title=title, command=command, arguments=args, tooltip=tooltip if tooltip != title else None)))

        status = lens.lenses(view, ls.session.settings.compiler_backend, task is not None, named, found)
        for item in status:
            at(item.line, item.title, VERIFY, [snap.uri], item.tooltip)
        kernels = [(k.name, k.line) for k in view.facts.kernels]
        with_status = {s.line for s in status}  # a status lens runs Verify itself and says "no inputs" itself
        for r in runnables.runnables(kernels, task is not None, named, found):
            if r.action in ("verify", "inputs") and r.line in with_status:
                continue
            if r.action in ("simulate", "inputs"):
                at(r.line, r.title, SIMULATE, [snap.uri, r.kernel, r.via], r.tooltip)
            else:
                at(r.line, r.title, VERIFY if r.action == "verify" else PROFILE, [snap.uri], r.tooltip)
        return out
