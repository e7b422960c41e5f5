"""The analyses behind the diagnostics tiers, as plain functions of an immutable ``Snapshot``.

They run in worker threads (never on the event loop) and know nothing about LSP:

- ``static``: ``diagnostics.static.check_text`` + the verified quick fixes (source ``nki-check``);
- ``simulate`` / ``verify``: the embedded toolchain in its sandboxed worker (``toolchain.api``), on a
  private temporary copy of the buffer (the toolchain reads files; the server must analyse the
  buffer, not the disk). Problem paths that name the copy are mapped back to the document.
- ``run_taskless``: a kernel with no task, simulated in the sandbox all the same (``toolchain.taskless``):
  via its ``__main__`` driver, a pytest test of the workspace, or its shape lines; a ``simulate`` run
  whose ``SimulateResult.via`` says which.

- ``remote``: a profile job (verify + latency) on the remote runner at ``runnerUrl``
  (``runner.client.RemoteRunner`` sends the buffer's copy, its task and sibling modules); the local
  verification runs too, and ``disagreement`` flags different verdicts. Only files inside the workspace
  folders (real paths) are sent: a task outside them is refused, a sibling module outside them (a
  symlink out of the workspace) is withheld (``outside_files``) and the runner's import of it fails.

Tiers are labelled by ``source``: ``nki-check`` (as you type), ``nki-sim`` (on save),
``nki-verify`` (on save when enabled, or the Verify command), ``nki-runner`` (remote on save). The real compiler is a seam:
``compiler_backend`` names the toolchain, and only ``embedded`` exists today.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import replace

from nki_agent.toolchain.facts.errors import doc_url
from nki_agent.toolchain.isolation.runner import Runner
from nki_agent.toolchain.protocol.jobs import SimulateResult, VerifyResult

from ..diagnostics.fixes import verified_fixes
from ..diagnostics.model import Diagnostic, Fix, RelatedInfo, from_problem
from ..diagnostics.static import Settings as CheckSettings
from ..diagnostics.static import check_text
from ..diagnostics.views.runs import RunResult, StaticResult
from ..toolchain import api, taskless
from ..toolchain.source_facts import KERNEL_DEF
from ..toolchain.task_discovery import inside
from .documents import MAX_DOC_BYTES, Snapshot
from .settings import ServerSettings, analysis_key
from .tasks import SELF, TaskRef

STATIC_SOURCE = "nki-check"
SIM_SOURCE = "nki-sim"
VERIFY_SOURCE = "nki-verify"
SERVER_SOURCE = "nki-agent"
REMOTE_SOURCE = "nki-runner"
DISAGREE = "sim_runner_disagrees"  # the local simulator and the remote runner reached different verdicts
REMOTE_TIMEOUT = 300.0  # seconds a remote job may take (queue wait on the runner comes on top)
WRONG_RESULT = "sim_wrong_result"  # verification ran but the outputs differ from the reference
_KERNEL_DEF = KERNEL_DEF  # a kernel decorator line, then its def (toolchain/source_facts.py)


def check_settings(settings: ServerSettings, input_shapes: dict[str, dict[str, tuple[int, ...]]] | None = None,
                   task_target: str | None = None) -> CheckSettings:
    # "auto": each file is checked against the target its simulation uses (toolchain.targets.resolve_target:
    # the task's TARGET when it declares one — ``task_target`` — else the API generation's default, applied
    # where the file's generation is known)
    target = task_target if settings.target == "auto" and task_target else settings.target
    return CheckSettings(target=target,
                         sdk_generation="new" if settings.api_generation == "new" else "",
                         input_shapes=dict(input_shapes or {}))


def too_large(snap: Snapshot) -> Diagnostic:
    return Diagnostic("sim_bad_input", "info", f"document is larger than {MAX_DOC_BYTES // (1024 * 1024)} MB: "
                      "NKI checks are skipped for it", snap.path, 1, 1, 1, 2, SERVER_SOURCE, doc_url("sim_bad_input"))


def static(snap: Snapshot, settings: CheckSettings) -> StaticResult:
    """As-you-type diagnostics of the snapshot, with the quick fixes that survive a re-check."""
    if snap.too_large:
        return StaticResult(snap.revision, snap.version, (too_large(snap),))
    path = snap.path
    diags = check_text(path, snap.text, settings)
    # quick fixes are re-checked lazily, when a code action asks for them: a re-check costs a full check
    return StaticResult(snap.revision, snap.version, tuple(diags), {})


def fixes_for(result: StaticResult, snap: Snapshot, settings: CheckSettings, index: int) -> list[Fix]:
    """The verified quick fixes of one diagnostic (memoised on the result of that document revision)."""
    if index not in result.fixes:
        found = verified_fixes(snap.path, snap.text, list(result.diagnostics),
                               lambda p, t: check_text(p, t, settings), only={index})
        result.fixes[index] = found.get(index, [])
    return result.fixes[index]


class OutsideWorkspace(ValueError):
    """A file a runner job would carry lies outside the workspace folders: nothing is sent."""


def outside_files(kernel: str, task: str, search: Sequence[str], roots: Sequence[str]) -> list[str]:
    """The files a runner bundle of ``kernel`` + ``task`` would read (``runner.bundle.dependencies``, the
    same closure) whose real path is outside ``roots``; ``kernel`` is the server's own copy of the buffer."""
    from ..runner.bundle import dependencies

    own = os.path.realpath(kernel)
    return [p for p in dependencies(kernel, task, search) if os.path.realpath(p) != own and not inside(p, roots)]


def run(kind: str, snap: Snapshot, task: TaskRef, settings: ServerSettings,
        cancel: threading.Event | None = None, remote: Runner | None = None,
        roots: Sequence[str] = ()) -> RunResult:
    """Simulate or verify the buffer of ``snap`` against ``task`` in the sandbox (``cancel`` kills it);
    ``kind`` "remote": verify and time it on ``remote`` (a ``RemoteRunner``; its connection errors —
    ``RunnerError`` — propagate, for one status message instead of diagnostics). A remote job carries only
    files inside ``roots`` (the workspace folders): a task outside raises ``OutsideWorkspace``, sibling
    modules outside are withheld."""
    tmpdir = tempfile.mkdtemp(prefix="nki-agent-")
    try:
        kernel = os.path.join(tmpdir, os.path.basename(snap.path) or "kernel.py")
        with open(kernel, "w", encoding="utf-8", errors="surrogatepass") as fh:
            fh.write(snap.text)
        task_path = kernel if task.path == SELF else task.path
        target = None if settings.target == "auto" else settings.target
        # the copy runs from a temp folder: the document's own folder stays importable (sibling helper modules)
        folder = os.path.dirname(snap.path) if snap.path else ""
        search = [folder] if folder and os.path.isdir(folder) else []
        res: VerifyResult | SimulateResult
        if kind == "remote" and remote is not None:
            if task.path != SELF and not (roots and inside(task.path, roots)):
                raise OutsideWorkspace(f"the task {task.path} is outside the workspace folders; not sent")
            withheld = outside_files(kernel, task_path, search, roots)
            res = remote.profile(kernel, task_path, seeds=3, target=target, kernel_name=None, timeout=REMOTE_TIMEOUT,
                                 cancel=cancel, search_path=search, protect=withheld)
        elif kind == "verify":
            res = api.verify(kernel, task_path, seeds=3, target=target, timeout=settings.simulation_timeout,
                             cancel=cancel, search_path=search)
        else:
            res = api.simulate(kernel, task_path, target=target, timeout=settings.simulation_timeout,
                               cancel=cancel, search_path=search)
        source = {"verify": VERIFY_SOURCE, "remote": REMOTE_SOURCE}.get(kind, SIM_SOURCE)
        diags = tuple(_relocate(from_problem(p, source, snap.path), kernel, snap, task.path)
                      for p in res.problem_list())
        if isinstance(res, VerifyResult) and res.compiled and not res.correct and not diags:
            diags = (wrong_result(res, snap, source),)
        return RunResult(kind, snap.revision, snap.version, diags, res, task.path, snap.text,
                         ran_kernels(res, snap.text, task), analysis_key(settings))
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def run_taskless(snap: Snapshot, settings: ServerSettings, root: str | None,
                 cancel: threading.Event | None = None, via: str = "", kernel_name: str = "") -> RunResult:
    """Simulate the buffer of a kernel with no task (``toolchain.taskless``: its ``__main__`` driver, a pytest
    test of the workspace, its shape lines) in the sandbox, on a private copy that the test imports in place
    of the file on disk. A ``simulate`` run; ``result.via`` says what ran ("none": nothing could). ``via`` /
    ``kernel_name``: only that source (a runnable lens)."""
    tmpdir = tempfile.mkdtemp(prefix="nki-agent-")
    try:
        kernel = os.path.join(tmpdir, os.path.basename(snap.path) or "kernel.py")
        with open(kernel, "w", encoding="utf-8", errors="surrogatepass") as fh:
            fh.write(snap.text)
        target = None if settings.target == "auto" else settings.target
        folder = os.path.dirname(snap.path) if snap.path else ""
        search = [folder] if folder and os.path.isdir(folder) else []
        res = api.simulate_taskless(kernel, origin=snap.path or kernel, text=snap.text, root=root, target=target,
                                    timeout=settings.simulation_timeout, cancel=cancel, search_path=search,
                                    via=via, kernel_name=kernel_name)
        kernels = ran_kernels(res, snap.text, None)
        line = _def_line(snap.text, kernels[0]) if kernels else _kernel_line(snap.text)
        diags = tuple(_relocate(from_problem(p, SIM_SOURCE, snap.path), kernel, snap, "", line)
                      for p in res.problem_list())
        return RunResult("simulate", snap.revision, snap.version, diags, res, "", snap.text, kernels,
                         analysis_key(settings))
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


_TASK_KERNEL = re.compile(r"^KERNEL\s*=\s*['\"]([A-Za-z_]\w*)['\"]", re.MULTILINE)


def ran_kernels(res: VerifyResult | SimulateResult, text: str, task: TaskRef | None) -> tuple[str, ...]:
    """The kernels of the buffer a run ran: those a task-less run launched, a simulation's ``kernel_name``,
    else the task's (``task_kernels``); () when unknown."""
    if isinstance(res, SimulateResult) and res.launches:
        return tuple(dict.fromkeys(launch.kernel_name for launch in res.launches))
    if isinstance(res, SimulateResult) and res.kernel_name:
        return (res.kernel_name,)
    return task_kernels(text, task)


def task_kernels(text: str, task: TaskRef | None) -> tuple[str, ...]:
    """The kernel a task runs, known without running anything: its ``KERNEL = "..."`` (read, never
    executed), else the buffer's only kernel; () when unknown."""
    if task is not None:
        source = text if task.path == SELF else _read_small(task.path)
        m = _TASK_KERNEL.search(source)
        if m:
            return (m.group(1),)
    names = [k.name for k in taskless.kernel_defs(taskless.parse(text), text)]
    return (names[0],) if len(names) == 1 else ()


def _read_small(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(1 << 20)
    except OSError:
        return ""


def _def_line(text: str, name: str) -> int:
    m = re.search(rf"^[ \t]*(?:async[ \t]+)?def[ \t]+{re.escape(name)}\b", text, re.MULTILINE)
    return text.count("\n", 0, m.start()) + 1 if m else _kernel_line(text)


def disagreement(local: RunResult, remote: RunResult, snap: Snapshot, where: str) -> Diagnostic | None:
    """A diagnostic when both verified this revision and reached different verdicts (else None)."""
    lr, rr = local.result, remote.result
    if not (isinstance(lr, VerifyResult) and isinstance(rr, VerifyResult) and lr.compiled and rr.compiled):
        return None
    if lr.correct == rr.correct or local.revision != remote.revision:
        return None
    verdict = {True: "correct", False: "wrong"}
    line = _kernel_line(snap.text)
    return Diagnostic(DISAGREE, "warning", f"the embedded simulator says {verdict[lr.correct]}, the runner at {where} "
                      f"({rr.backend} backend) says {verdict[rr.correct]}", snap.path, line, 1, line, 2, REMOTE_SOURCE,
                      doc_url(DISAGREE))


def wrong_result(res: VerifyResult, snap: Snapshot, source: str) -> Diagnostic:
    """The outputs differ: at the line of the last store into the first mismatching element when the
    simulator knows it (``Mismatch.line``), else at the kernel's ``def``."""
    fm = next((s.first_mismatch for s in res.seeds if s.first_mismatch is not None), None)
    lines = snap.text.split("\n")
    if fm is not None and fm.line and 0 < fm.line <= len(lines) and lines[fm.line - 1].strip():
        line, text = fm.line, lines[fm.line - 1]  # the whole statement's first line
        start, end = len(text) - len(text.lstrip()) + 1, len(text.rstrip()) + 1
        where = f"; first at output {fm.output}{fm.index}: got {fm.got:.6g}, expected {fm.expected:.6g}"
    else:
        line, start, end, where = _kernel_line(snap.text), 1, 2, ""
    return Diagnostic(WRONG_RESULT, "error", f"kernel output differs from the reference: {res.mismatches} mismatches, "
                      f"max abs error {res.max_abs_error:.3g}{where}", snap.path, line, start, line, end, source,
                      doc_url(WRONG_RESULT))


def _kernel_line(text: str) -> int:
    m = _KERNEL_DEF.search(text)
    return text.count("\n", 0, m.start("def")) + 1 if m else 1


def _relocate(d: Diagnostic, tmp_kernel: str, snap: Snapshot, task_path: str, line: int = 1) -> Diagnostic:
    """Map the temporary copy's path back to the document; problems in other files (the task, a test) land
    on ``line`` (the kernel's ``def`` when known), naming where they were reported."""
    related = tuple(replace(r, path=snap.path) if _same(r.path, tmp_kernel) else r for r in d.related)
    if _same(d.path, tmp_kernel) or not d.path:
        return replace(d, path=snap.path, related=related)
    where = RelatedInfo(d.path, d.line, d.column, f"{d.code} reported here")
    end = 2 if line == 1 else len((snap.text.split("\n") + [""])[line - 1]) + 1
    return replace(d, path=snap.path, line=line, column=1, end_line=line, end_column=max(end, 2),
                   message=f"{d.message} (in {os.path.basename(d.path)}:{d.line})", related=(where,) + related)


def _same(a: str, b: str) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return a == b
