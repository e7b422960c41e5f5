"""The "Add input shapes" code action: a kernel with nothing to run it (no task, no ``__main__`` driver, no
test that calls it) gets a shape line inserted above its decorator, pre-filled from what is known —

    # nki: a=(128, 512) float32, b=(128, 512) float32

— each required parameter with the shape and dtype the static analysis (annotations, ``assert x.shape == ...``)
or an earlier run knows, unknown dimensions as ``128`` for the user to edit, and a parameter the kernel takes
as a value (a dtype, a flag, a count) as ``name=?``, which the user must fill in
(``toolchain.taskless.shape_line``). Saving then simulates the kernel on random inputs of those shapes
(``toolchain.taskless``, "simulated from the shape line").

Called from ``code_actions.py`` (``actions``), so the lightbulb of any position offers it; a request whose
range touches a kernel offers it for that kernel only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from lsprotocol import types as T

from ...diagnostics.views.facts import TensorFact
from ...toolchain import taskless
from ...toolchain.taskless.source import KernelDef
from ..positions import to_lsp

if TYPE_CHECKING:
    from ..app import NkiLanguageServer

TITLE = "Add input shapes"


def known_inputs(k: KernelDef, tensors: Sequence[TensorFact], ran: dict[str, tuple[int, ...]]
                 ) -> dict[str, tuple[tuple[int | None, ...] | None, str | None]]:
    """param -> (shape, dtype) of ``k``'s inputs: what the static analysis knows of its parameters (annotations,
    ``assert x.shape == (...)`` in the body), then the shapes an earlier run saw."""
    known: dict[str, tuple[tuple[int | None, ...] | None, str | None]] = {}
    for f in tensors:
        if f.line == k.line and f.name in k.params and f.shape is not None:
            known[f.name] = (f.shape, f.dtype or known.get(f.name, (None, None))[1])
    for name, shape in ran.items():
        known[name] = (shape, known.get(name, (None, None))[1])
    return known


async def actions(ls: NkiLanguageServer, uri: str, params: T.CodeActionParams) -> list[T.CodeAction]:
    """One "Add input shapes" action per kernel that has nothing to run it with (none when it has a task)."""
    snap = ls.session.store.get(uri)
    if snap is None or snap.too_large or await ls.session.task(snap) is not None:
        return []
    found = await ls.session.taskless_facts(snap)
    if found.main_line or found.tests or not ls.session.store.is_current(snap):
        return []
    lacking = [k for k in found.kernels if k.name not in found.shapes]
    first, last = params.range.start.line + 1, params.range.end.line + 1
    touched = [k for k in lacking if k.first_line <= last and first <= k.end_line]
    chosen = touched or lacking
    if not chosen:
        return []
    facts = await ls.session.facts(snap)
    ran = ls.session.input_shapes(snap, facts)
    lines = snap.text.split("\n")
    out = []
    for k in chosen:
        pl, pc = to_lsp(lines, k.first_line, 1)
        edit = T.TextEdit(range=T.Range(T.Position(pl, pc), T.Position(pl, pc)),
                          new_text=taskless.shape_line(k, known_inputs(k, facts.tensors, ran.get(k.name, {}))) + "\n")
        title = TITLE if len(found.kernels) == 1 else f"{TITLE} of `{k.name}`"
        out.append(T.CodeAction(title=title, kind=T.CodeActionKind.QuickFix, edit=T.WorkspaceEdit(document_changes=[
            T.TextDocumentEdit(text_document=T.OptionalVersionedTextDocumentIdentifier(uri=uri, version=snap.version),
                               edits=[edit])])))
    return out
