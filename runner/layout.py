"""A job's files on the runner: the kernel's bundle and the task's bundle, each in its own folder.

A job carries two bundles. The kernel's: the kernel file and ``modules`` (the sibling modules the
kernel imports). The task's: the task file and ``task_modules`` (the sibling modules the task
imports). ``prepare`` writes them into ``<job>/kernel/`` and ``<job>/task/``; each role of a
verification puts only its own file's folder on ``sys.path`` (``toolchain/tasks.py``), so the task's
imports resolve in the task's bundle and the installed environment, never in the kernel's folder.
(Before, one flat folder held both: a kernel's ``helper.py`` replaced the ``helper`` the task imports.)

``check`` refuses, before anything is stored or run, a kernel bundle that shadows something:

- a file of the kernel's bundle named like a module the task's bundle imports, unless the task's
  bundle holds the very same text under that name (a helper both import from one folder);
- a file of the kernel's bundle named like an installed module: the standard library, a package of
  the runner's Python, or the NKI / Neuron SDK names (``nki``, ``neuronxcc``, ...).

The client (``bundle.py``) runs the same check before sending, so a local tool gets the refusal as a
result; the runner answers it with HTTP 422 naming the module.

``BundledJobRequest`` is ``protocol.JobRequest`` with the task's bundle (``task_modules``); the runner
reads every request as one (a request without ``task_modules`` has a task bundle of the task alone).
"""

from __future__ import annotations

import functools
import importlib.machinery
import os
import site
import sys
import sysconfig
from collections.abc import Sequence

from pydantic import Field

from nki_agent.toolchain.protocol.jobs import MAX_MODULES, JobRequest, SourceFile
from .backends import PreparedJob
from .bundle import imported_names

KERNEL_DIR = "kernel"
TASK_DIR = "task"
# names the toolchain or a Neuron host provides (the simulator's shim, the SDK, its frameworks) even where
# they are not installed as files: a kernel module may never take one
SDK_NAMES = frozenset({"nki", "neuronxcc", "nki_agent", "nkipy", "torch", "torch_neuronx", "torch_xla",
                       "libneuronxla", "jax", "jax_neuronx", "numpy", "ml_dtypes", "neuronx_distributed"})


class ShadowError(ValueError):
    """A kernel bundle that shadows a task import or an installed module (``module`` names it)."""

    def __init__(self, module: str, message: str) -> None:
        super().__init__(message)
        self.module = module


class BundledJobRequest(JobRequest):
    """A job request with the task's own bundle: ``modules`` are the kernel's sibling modules,
    ``task_modules`` the task's (absent: the task imports none). A kernel that is its own task
    (``task`` None) has one bundle: ``modules``."""

    task_modules: list[SourceFile] = Field(default_factory=list, max_length=MAX_MODULES)

    @classmethod
    def of(cls, request: JobRequest) -> BundledJobRequest:
        return request if isinstance(request, cls) else cls.model_validate(request.model_dump())

    def kernel_files(self) -> list[SourceFile]:
        return [self.kernel, *self.modules]

    def task_files(self) -> list[SourceFile]:
        """The task's bundle (empty when the kernel file is its own task)."""
        return [self.task, *self.task_modules] if self.task is not None else []

    def files(self) -> list[SourceFile]:
        """Every file of the job; names are distinct within each bundle (raises ValueError)."""
        if self.task is None and self.task_modules:
            raise ValueError("task_modules without a task: a kernel that is its own task sends its modules as modules")
        for what, files in (("the kernel's", self.kernel_files()), ("the task's", self.task_files())):
            names = [f.name for f in files]
            if len(set(names)) != len(names):
                raise ValueError(f"file names of {what} bundle must be distinct: {names}")
        return self.kernel_files() + self.task_files()


def _stem(name: str) -> str:
    return name.removesuffix(".py")


def _paths() -> list[str]:
    """Where an installed module lives for the jailed worker (``python -I``: no current folder)."""
    paths = sysconfig.get_paths()
    out = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths]
    out += site.getsitepackages() if hasattr(site, "getsitepackages") else []
    prefixes = tuple(dict.fromkeys((sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)))
    out += [p for p in sys.path if p and os.path.isabs(p) and p.startswith(prefixes)]
    extra = os.environ.get("NKI_AGENT_SDK_PATH", "")
    out += [p for p in extra.split(os.pathsep) if p and os.path.isabs(p)]
    return [p for p in dict.fromkeys(out) if os.path.isdir(p)]


@functools.lru_cache(maxsize=4096)
def installed(name: str) -> bool:
    """Whether ``import name`` finds a module of the environment (standard library, site-packages, SDK)."""
    if name in SDK_NAMES or name in sys.builtin_module_names or name in sys.stdlib_module_names:
        return True
    try:
        return importlib.machinery.PathFinder.find_spec(name, _paths()) is not None
    except (ImportError, ValueError, OSError):
        return False


def shadowing(kernel_files: Sequence[SourceFile], task_files: Sequence[SourceFile]) -> tuple[str, str] | None:
    """(module, why) of the first file of the kernel's bundle that shadows a task import or an
    installed module, or None. ``kernel_files`` starts with the kernel file; ``task_files`` is the task's
    bundle (empty: the kernel is its own task)."""
    task_text = {f.name: f.text for f in task_files}
    task_imports: set[str] = set()
    for f in task_files:
        task_imports.update(imported_names(f.text))
    for i, f in enumerate(kernel_files):
        name = _stem(f.name)
        what = "kernel file" if i == 0 else "kernel's module"
        if name in task_imports and task_text.get(f.name) != f.text:
            where = ("the task's bundle has another module of that name" if f.name in task_text
                     else "the task's bundle does not hold it")
            return name, (f"the {what} {f.name} shadows the module '{name}' the task imports ({where}); "
                          "rename it")
        if installed(name):
            return name, f"the {what} {f.name} shadows the installed module '{name}'; rename it"
    return None


def check(request: BundledJobRequest) -> None:
    """Raise ``ShadowError`` when the kernel's bundle shadows a task import or an installed module, and
    ``ValueError`` when names repeat within a bundle."""
    request.files()
    found = shadowing(request.kernel_files(), request.task_files())
    if found is not None:
        raise ShadowError(*found)


def prepare(job_id: str, request: JobRequest, folder: str) -> PreparedJob:
    """Write the job's bundles into ``folder``/kernel and ``folder``/task (a kernel that is its own task:
    ``folder``/kernel only)."""
    req = BundledJobRequest.of(request)
    kernel_dir = os.path.join(folder, KERNEL_DIR)
    task_dir = os.path.join(folder, TASK_DIR)
    for d, files in ((kernel_dir, req.kernel_files()), (task_dir, req.task_files())):
        if not files:
            continue
        os.makedirs(d, mode=0o700, exist_ok=True)
        for f in files:
            with open(os.path.join(d, f.name), "w", encoding="utf-8", errors="surrogatepass") as fh:
                fh.write(f.text)
    kernel = os.path.join(kernel_dir, req.kernel.name)
    task = os.path.join(task_dir, req.task.name) if req.task else kernel
    return PreparedJob(job_id, req, folder, kernel, task)
