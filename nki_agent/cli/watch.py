"""``nki-agent watch DIR``: verify every kernel under DIR, then again whenever it or what it reads changes.

A kernel file is a ``.py`` file with an ``@nki.jit``-style decorator (hidden folders, ``__pycache__``
and virtualenvs are skipped); its task is ``--task`` or the one ``toolchain/task_discovery.py`` finds
(``# nki-task:`` comment, the file itself, a sibling ``task.py``). Each kernel is verified once at
start; afterwards a change on disk (watchdog) to the kernel, its task or a sibling module either
imports (``runner/bundle.dependencies``) re-verifies it, after a short quiet period so a burst of
events (an editor's save, a ``git checkout``) costs one verification per kernel. New kernel files are
picked up, deleted ones dropped. One line per result: ✓/✗, the kernel, the seeds, the largest error,
the latency when the result has one, and where it ran (``local`` or the runner's URL). A broken
file, a crashed verification or an unreachable runner is a ✗ line, never the end of the watch.
Ctrl-C stops it. ``--once`` verifies everything once and exits: 1 if any kernel is not correct.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import typer

from ..runner.bundle import BundleError, dependencies, read_source
from ..toolchain import api
from nki_agent.toolchain.protocol.jobs import VerifyResult
from ..toolchain.source_facts import KERNEL_DECORATOR_LINE
from ..toolchain.task_discovery import SELF, discover
from . import options, remote
from .render import console

DEBOUNCE_S = 0.3
_KERNEL = KERNEL_DECORATOR_LINE  # toolchain/source_facts.py
_SKIP_DIRS = {"__pycache__", "node_modules", "venv", "site-packages"}


def is_kernel_file(path: str) -> bool:
    if not path.endswith(".py") or not os.path.isfile(path):
        return False
    try:
        return bool(_KERNEL.search(read_source(path)))
    except BundleError:
        return False


def kernel_files(root: str) -> list[str]:
    out: list[str] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
        out += [os.path.join(folder, f) for f in sorted(files) if is_kernel_file(os.path.join(folder, f))]
    return [os.path.abspath(p) for p in out]


def _shown(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def result_line(kernel: str, res: VerifyResult) -> str:
    """One line for a verification: mark, kernel, verdict, seeds, max error, latency (if any), runner."""
    where = f"[{res.runner}" + (", unsandboxed" if res.sandbox == "unsandboxed" else "") + "]"
    if not res.compiled:
        first = res.problems[0] if res.problems else None
        why = "did not run"
        if first is not None:
            line = f" (line {first.location.line})" if first.location and first.location.line > 1 else ""
            why += f": [{first.code}] {first.message.splitlines()[0] if first.message else ''}{line}"
        return f"✗ {_shown(kernel)}  {why}  {where}"
    visible = sum(1 for s in res.seeds if not s.hidden)
    hidden = len(res.seeds) - visible
    seeds = f"{visible} seed(s)" + (f" + {hidden} hidden" if hidden else "")
    mark, verdict = ("✓", "correct") if res.correct else ("✗", "INCORRECT")
    text = f"{mark} {_shown(kernel)}  {verdict} on {seeds}, max abs err {res.max_abs_error:.3g}"
    latency = getattr(res, "latency", None)
    if latency is not None and getattr(latency, "p50_us", None) is not None:
        text += f", p50 {latency.p50_us:.2f} us ({latency.kind})"
    if not res.correct and res.problems:
        text += f"  [{res.problems[0].code}]"
    return f"{text}  {where}"


@dataclass
class Kernel:
    path: str
    task: str | None  # None: no task found
    deps: frozenset[str] = frozenset()


class Watcher:
    """The kernels under ``root``, what each depends on, and the verifications a change makes due.

    ``changed(path)`` is called from the watchdog thread; ``run_due`` from the main thread verifies
    the kernels whose quiet period has passed. ``clock`` and ``verify`` are seams for tests."""

    def __init__(self, root: str, task: str | None, seeds: int, target: str | None, timeout: float,
                 emit: Callable[[str], None], clock: Callable[[], float] = time.monotonic,
                 debounce: float = DEBOUNCE_S, verify: Callable[..., VerifyResult] = api.verify) -> None:
        self.root = os.path.abspath(root)
        self.task = os.path.abspath(task) if task else None
        self.seeds, self.target, self.timeout = seeds, target, timeout
        self.emit, self.clock, self.debounce, self._verify = emit, clock, debounce, verify
        self.kernels: dict[str, Kernel] = {}
        self.pending: dict[str, float] = {}  # kernel -> when its quiet period ends
        self.cond = threading.Condition()
        self.failed: set[str] = set()
        self.roots: list[str] | None = None  # with a runner: a discovered task outside these is not used

    # ------------------------------------------------------------------ what is watched

    def _task_of(self, path: str) -> str | None:
        if self.task:
            return self.task
        try:
            ref = discover(path, read_source(path), {}, self.root, self.roots)
        except BundleError:
            return None
        if ref is None:
            return None
        return path if ref.path == SELF else os.path.abspath(ref.path)

    def _track(self, path: str) -> Kernel:
        task = self._task_of(path)
        k = Kernel(path, task, frozenset(dependencies(path, task)) if task else frozenset({path}))
        self.kernels[path] = k
        return k

    def scan(self) -> list[str]:
        with self.cond:
            for p in kernel_files(self.root):
                self._track(p)
            return sorted(self.kernels)

    def changed(self, path: str) -> None:
        """``path`` was created, modified, moved or deleted: schedule the kernels that read it."""
        path = os.path.abspath(path)
        if not path.endswith(".py"):
            return
        with self.cond:
            due = self.clock() + self.debounce
            if path in self.kernels and not is_kernel_file(path):
                del self.kernels[path]
                self.pending.pop(path, None)
                self.failed.discard(path)
            elif path not in self.kernels and path.startswith(self.root + os.sep) and is_kernel_file(path):
                self._track(path)
            folder = os.path.dirname(path)
            for k in self.kernels.values():
                if path in k.deps or (k.task is None and os.path.dirname(k.path) == folder):
                    self.pending[k.path] = due
            self.cond.notify_all()

    # ------------------------------------------------------------------ verifying

    def verify(self, path: str) -> bool:
        """Verify one kernel and print its line; True when correct (or when it has no task)."""
        with self.cond:
            k = self._track(path) if os.path.isfile(path) else None
        if k is None:
            return True
        if k.task is None:
            self.emit(f"- {_shown(path)}  no task: pass --task, add `# nki-task: path`, define get_inputs(), "
                      "or put a task.py next to it")
            return True
        try:
            res = self._verify(path, k.task, seeds=self.seeds, target=self.target, timeout=self.timeout)
            line, ok = result_line(path, res), res.correct
        except Exception as e:  # noqa: BLE001 - a crashed verification (runner unreachable, bug) is a ✗ line
            from ..runner.client import RunnerError

            why = str(e) if isinstance(e, RunnerError) else f"verification failed: {type(e).__name__}: {e}"
            line, ok = f"✗ {_shown(path)}  {why}", False
        with self.cond:
            (self.failed.discard if ok else self.failed.add)(path)
        self.emit(line)
        return ok

    def run_due(self) -> int:
        """Verify the kernels whose quiet period has ended; how many were verified."""
        with self.cond:
            now = self.clock()
            due = sorted(p for p, t in self.pending.items() if t <= now)
            for p in due:
                del self.pending[p]
        for p in due:
            self.verify(p)
        return len(due)

    def wait(self, stop: threading.Event, timeout: float = 1.0) -> None:
        """Block until a pending kernel is due, ``stop`` is set, or ``timeout`` passed."""
        with self.cond:
            if stop.is_set():
                return
            left = min((t for t in self.pending.values()), default=None)
            self.cond.wait(timeout if left is None else max(0.0, min(timeout, left - self.clock())))

    def once(self, paths: Iterable[str]) -> bool:
        results = [self.verify(p) for p in paths]  # every kernel, not up to the first failure
        return all(results)


def _observe(watcher: Watcher, stop: threading.Event, started: Callable[[], None]) -> None:
    from watchdog.events import FileSystemEvent, FileSystemEventHandler
    from watchdog.observers import Observer

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event: FileSystemEvent) -> None:
            if event.is_directory or event.event_type in ("opened", "closed_no_write"):
                return
            for p in (event.src_path, getattr(event, "dest_path", "")):
                if p:
                    watcher.changed(os.fsdecode(p))

    observer: Any = Observer()
    observer.schedule(Handler(), watcher.root, recursive=True)
    observer.start()
    started()  # after start: a change from now on is seen
    try:
        while not stop.is_set():
            watcher.wait(stop)
            watcher.run_due()
    finally:
        observer.stop()
        observer.join(10)


def command(
    folder: str = typer.Argument(..., help="Folder to watch (recursively)."),
    task: str | None = typer.Option(None, "--task", "-t", help="Task of every kernel (default: each kernel's "
                                       "own: `# nki-task:` comment, get_inputs() in the file, or a sibling task.py)."),
    seeds: int = typer.Option(3, "--seeds", min=1, max=16, help="Verification seeds."),
    target: str | None = options.Target,
    once: bool = typer.Option(False, "--once", help="Verify every kernel once and exit (1 if any is not correct)."),
    runner_url: str | None = remote.RunnerUrl,
    token_file: str | None = remote.TokenFile,
    timeout: float = options.Timeout,
) -> None:
    """Verify the kernels under a folder, and re-verify each when it, its task or its helpers change."""
    target = options.validate_target(target)
    if not os.path.isdir(folder):
        raise typer.BadParameter(f"{folder} is not a folder", param_hint="FOLDER")
    if task is not None and not os.path.isfile(task):
        raise typer.BadParameter(f"no such file: {task}", param_hint="--task")
    watcher = Watcher(folder, task, seeds, target, timeout, lambda s: console.print(s, markup=False))
    if runner_url:
        watcher.roots = remote.scope() + [os.path.abspath(folder)]
    with remote.use_runner(runner_url, token_file, roots=remote.scope(task) + [os.path.abspath(folder)]):
        kernels = watcher.scan()
        if not kernels:
            console.print(f"no kernel files (@nki.jit) under {folder}", markup=False)
        ok = watcher.once(kernels)
        if once:
            raise typer.Exit(0 if ok else 1)
        stop = threading.Event()
        try:
            _observe(watcher, stop, lambda: console.print(f"watching {folder} for changes (Ctrl-C stops)",
                                                          markup=False, style="dim"))
        except KeyboardInterrupt:
            stop.set()
            console.print("stopped", markup=False, style="dim")
