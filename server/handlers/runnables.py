"""workspace/executeCommand of the runnable lenses (``diagnostics/views/runnables.py``): ``nki.simulate`` and
``nki.profile``.

``nki.simulate [uri, kernel, via]`` simulates the open buffer now, in the sandbox, as the lens said: ``via``
"task" on the task's inputs (no reference check), "shapes" on that kernel's shape line only, "test" through the
workspace test, "main" through the file's ``__main__`` driver. ``nki.profile [uri]`` verifies the buffer against
its task and reports its latency: the cost model's estimate, labelled so, and — with a runner configured — the
runner's measurement in its own lens. Both return at once (``{"started": ...}``) and run in the background with
work-done progress (cancelling it stops the run); the result is published like a save's, the lenses are
refreshed and one summary message says how it went.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from lsprotocol import types as T

from ...toolchain.protocol.jobs import SimulateResult, VerifyResult
from ..progress import WorkProgress
from .commands import no_task, open_document

if TYPE_CHECKING:
    from ..analysis import RunResult
    from ..app import NkiLanguageServer

SIMULATE = "nki.simulate"
PROFILE = "nki.profile"
VIAS = ("task", "shapes", "test", "main")


def summary(run: RunResult | None, what: str) -> tuple[str, T.MessageType]:
    """The one message a runnable's run ends with: verdict, target and the latency estimate (labelled)."""
    if run is None:
        return f"NKI: {what} failed to run (see the server log)", T.MessageType.Error
    res = run.result
    errors = sorted({d.code for d in run.diagnostics if d.severity == "error"})
    est = f" · {res.estimate.summary()}" if res.estimate is not None else " · estimate unavailable"
    if errors:
        return f"NKI: ✗ {what} on {res.target or '?'}: {', '.join(errors)}", T.MessageType.Warning
    if isinstance(res, VerifyResult):
        if not res.correct:
            return f"NKI: ✗ wrong result on {res.target}, max error {res.max_abs_error:.3g}", T.MessageType.Warning
        return f"NKI: ✓ verified on {res.target}, max error {res.max_abs_error:.3g}{est}", T.MessageType.Info
    assert isinstance(res, SimulateResult)
    if res.via == "none":
        return ("NKI: nothing to simulate it with: add a shape line above the kernel (`# nki: a=(128, 512) float32`, "
                "the quick fix Add input shapes) or a task (`# nki-task: PATH`)"), T.MessageType.Warning
    if res.via not in ("task", "") and not res.launches:
        return f"NKI: {what}: nothing launched a kernel of this file", T.MessageType.Warning
    ran = ", ".join(run.kernels) or "the kernel"
    whose = " (self-reported by the file)" if res.self_reported else ""
    return f"NKI: simulated {ran} on {res.target or '?'}{whose}{est}", T.MessageType.Info


async def _background(ls: NkiLanguageServer, title: str, path: str, what: str, work: Any) -> None:
    shown = WorkProgress(ls, title, path, asyncio.current_task())
    try:
        result = await work
    except asyncio.CancelledError:
        ls.window_show_message(T.ShowMessageParams(type=T.MessageType.Info, message=f"NKI: {what} cancelled"))
        return
    finally:
        shown.end()
    ls.scheduler.refresh_views()
    message, kind = summary(result, what)
    ls.window_show_message(T.ShowMessageParams(type=kind, message=message))


def register(ls: NkiLanguageServer) -> None:
    @ls.command(SIMULATE)
    async def simulate(ls: Any, *args: Any) -> dict[str, Any]:
        snap = open_document(ls, SIMULATE, args)
        kernel = args[1] if len(args) > 1 and isinstance(args[1], str) else ""
        via = args[2] if len(args) > 2 and isinstance(args[2], str) else "task"
        if via not in VIAS:
            raise ValueError(f"nki.simulate: unknown source {via[:20]!r} (one of {', '.join(VIAS)})")
        if via == "task":
            task = await ls.session.task(snap)
            if task is None:
                return no_task(ls)
            work = ls.scheduler.run("simulate", snap, task)
        else:
            work = ls.scheduler.run_taskless(snap, via, kernel if via == "shapes" else "")
        asyncio.ensure_future(_background(ls, "NKI: simulating", snap.path, "simulation", work))
        return {"started": True, "via": via, "kernel": kernel}

    @ls.command(PROFILE)
    async def profile(ls: Any, *args: Any) -> dict[str, Any]:
        snap = open_document(ls, PROFILE, args)
        task = await ls.session.task(snap)
        if task is None:
            return no_task(ls)
        remote = bool(ls.session.settings.runner_url)
        if remote:  # measured on the runner: its lens shows the latency it reports
            ls.scheduler.spawn(f"remote:{snap.uri}", ls.scheduler.remote.run(snap, task))
        work = ls.scheduler.run("verify", snap, task, name=f"command:{snap.uri}")
        asyncio.ensure_future(_background(ls, "NKI: profiling", snap.path, "profile", work))
        return {"started": True, "task": task.path, "measured_on_runner": remote}
