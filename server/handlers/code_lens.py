"""textDocument/codeLens: above each kernel ``def``, the last verification and a Verify command, with the
cost model's estimate of that kernel appended ("· ≈ 6.97 ms est. trn1, TensorE-bound", always "est.");
with a remote runner, a second lens ("NKI runner: ...") with its verdict and latency as the runner reports
it — the two are never merged."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as T

from ...diagnostics.cost_view import CostView
from ...toolchain.protocol import ProfileResult, VerifyResult
from ..positions import to_lsp
from .commands import VERIFY

if TYPE_CHECKING:
    from ..analysis import RunResult
    from ..app import NkiLanguageServer


def estimate_note(view: CostView | None) -> str:
    """" · ≈ 6.97 ms est. trn1, TensorE-bound" ("" without an estimate; marked when the text changed since)."""
    if view is None:
        return ""
    return f" · {view.estimate.summary()}" + (" (before your edits)" if view.stale else "")


def title(run: RunResult | None, backend: str, view: CostView | None = None, no_task: bool = False) -> str:
    """The local lens: verdict (and the estimate, when ``view`` is given) then the Verify command; with
    no task found and nothing run yet it says so plainly (saving has nothing to run against)."""
    note = estimate_note(view)
    if run is None and no_task:
        return "NKI: no task found — add `# nki-task: PATH` or a task.py beside this file to simulate on save"
    if run is None:
        return f"NKI: not verified{note} — Verify"
    res = run.result
    target = res.target or "?"
    if res.sandbox == "unsandboxed":  # namespaces unavailable: say so where the verdict is shown
        backend += ", UNSANDBOXED"
    if isinstance(res, VerifyResult) and res.correct:
        return f"NKI: ✓ verified on {target} ({backend}), max error {res.max_abs_error:.3g}{note} — Verify again"
    if isinstance(res, VerifyResult) and res.compiled:
        return f"NKI: ✗ wrong result on {target} ({backend}), max error {res.max_abs_error:.3g}{note} — Verify again"
    codes = ", ".join(sorted({d.code for d in run.diagnostics})) or "failed"
    return f"NKI: ✗ {codes} ({backend}){note} — Verify again"


def remote_title(run: RunResult) -> str:
    """The remote runner's verdict and latency: "NKI runner: ✓ correct (simulator backend) · p50 ..."."""
    res = run.result
    where = f"{res.backend} backend" + (", UNSANDBOXED" if res.sandbox == "unsandboxed" else "")
    latency = f" · {res.latency.summary()}" if isinstance(res, ProfileResult) else ""
    if isinstance(res, VerifyResult) and res.correct:
        return f"NKI runner: ✓ correct ({where}){latency}"
    if isinstance(res, VerifyResult) and res.compiled:
        return f"NKI runner: ✗ wrong result ({where}), max error {res.max_abs_error:.3g}"
    codes = ", ".join(sorted({d.code for d in run.diagnostics})) or "failed"
    return f"NKI runner: ✗ {codes} ({where})"


def register(ls: NkiLanguageServer) -> None:
    @ls.feature(T.TEXT_DOCUMENT_CODE_LENS)
    async def code_lens(ls: NkiLanguageServer, params: T.CodeLensParams) -> list[T.CodeLens]:
        snap = ls.state.store.get(params.text_document.uri)
        if snap is None or snap.too_large:
            return []
        facts = await ls.state.facts(snap)
        st = ls.state.docs.get(snap.uri)
        run = st.runs.get("verify") if st else None
        remote = st.runs.get("remote") if st else None
        lines = snap.text.split("\n")
        view = ls.state.cost_view(snap)
        estimated = view.kernel_line([(k.name, k.line) for k in facts.kernels]) if view else None
        out = []
        no_task = run is None and ls.state.task_of(snap) is None
        for k in facts.kernels:
            pl, pc = to_lsp(lines, k.line, 1)
            rng = T.Range(T.Position(pl, 0), T.Position(pl, pc))
            text = title(run, ls.state.settings.compiler_backend, view if k.line == estimated else None, no_task)
            out.append(T.CodeLens(range=rng, command=T.Command(title=text, command=VERIFY, arguments=[snap.uri])))
            if remote is not None:
                out.append(T.CodeLens(range=rng, command=T.Command(
                    title=remote_title(remote), command=VERIFY, arguments=[snap.uri])))
        return out
