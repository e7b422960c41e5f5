"""The real-compiler path: run the installed Neuron SDK when there is one, else the embedded toolchain.

- Classic kernels (``neuronxcc.nki``) with the ``neuronxcc`` package importable: ``simulate_kernel``
  (or ``baremetal``) in a subprocess (``compile_driver``).
- New kernels (``nki``) with the real ``nki`` package importable: ``nki.simulate`` (or a device ``jit`` call).
- Model files (HLO ``.pb`` and the like) with ``neuronx-cc`` on PATH: ``neuronx-cc compile``.
- Otherwise ``embedded``: the NumPy simulator (with a task) or the static check (without one).
The subprocess output is parsed with ``parsers.parse_log``; the result always names the backend.
Detection never imports the SDK into this process (``PathFinder.find_spec`` only).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib.machinery import PathFinder
from typing import Any

from ..toolchain.check import check_file
from .model import Diagnostic, from_problem
from .parsers import parse_log

EMBEDDED = "embedded"
# Real tracing/compiling a kernel takes tens of seconds; a stuck compiler must still end.
DEFAULT_TIMEOUT = 300.0
# Keep the tail of huge compiler output (the decisive lines come last) and a little of the head.
MAX_OUTPUT = 4 * 1024 * 1024
_MODES = ("simulate", "baremetal", "jit")


@dataclass(frozen=True)
class Sdk:
    """What of the Neuron SDK is installed: package directories and the ``neuronx-cc`` executable."""

    neuronxcc: str | None = None  # directory holding the neuronxcc package (for PYTHONPATH)
    nki: str | None = None  # directory holding the real nki package
    neuronx_cc: str | None = None  # path of the neuronx-cc executable


@dataclass
class CompileResult:
    backend: str  # "neuronxcc.nki", "nki", "neuronx-cc" or "embedded"
    diagnostics: list[Diagnostic]
    ok: bool
    command: list[str] = field(default_factory=list)
    returncode: int | None = None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "ok": self.ok, "command": self.command, "returncode": self.returncode,
                "detail": self.detail, "diagnostics": [d.as_dict() for d in self.diagnostics]}


def _search_path(env: Mapping[str, str]) -> list[str]:
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return extra + [p for p in sys.path if p]


def _package_dir(name: str, paths: list[str], need: tuple[str, ...] = ()) -> str | None:
    spec = PathFinder.find_spec(name, paths)
    if spec is None or not spec.submodule_search_locations:
        return None
    pkg = list(spec.submodule_search_locations)[0]
    for sub in need:
        if not (os.path.isdir(os.path.join(pkg, sub)) or any(
                f.startswith(sub + ".") for f in os.listdir(pkg) if os.path.isfile(os.path.join(pkg, f)))):
            return None
    return os.path.dirname(pkg)


def detect(env: Mapping[str, str] | None = None) -> Sdk:
    """Find the SDK without importing it (``env`` defaults to this process's environment)."""
    env = os.environ if env is None else env
    paths = _search_path(env)
    try:
        classic = _package_dir("neuronxcc", paths, ("nki",))
        new = _package_dir("nki", paths, ("language", "isa"))
    except (OSError, ImportError, ValueError):
        classic = new = None
    exe = shutil.which("neuronx-cc", path=env.get("PATH", os.defpath))
    return Sdk(classic, new, exe)


def compile_kernel(kernel: str, task: str | None = None, *, kernel_name: str | None = None, target: str | None = None,
                   mode: str = "simulate", timeout: float = DEFAULT_TIMEOUT, prefer: str = "auto",
                   env: Mapping[str, str] | None = None, search_path: Sequence[str] = (),
                   cancel: threading.Event | None = None) -> CompileResult:
    """Compile/trace ``kernel`` with the real SDK when available (``prefer='auto'``), else the embedded toolchain.

    ``search_path``: folders the kernel may import from after its own (a temp copy's original folder);
    read only — the SDK subprocess gets them on ``PYTHONPATH`` with bytecode writing off. ``cancel``
    stops an embedded simulation (its sandboxed worker is killed)."""
    env = dict(os.environ if env is None else env)
    if search_path:
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # the user's folder is read, never written
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), *search_path) if p)
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {', '.join(_MODES)}")
    sdk = detect(env) if prefer != EMBEDDED else Sdk()
    if not kernel.endswith(".py"):
        if sdk.neuronx_cc:
            return _neuronx_cc(sdk.neuronx_cc, kernel, target, timeout, env)
        return _embedded(kernel, task, kernel_name, target, timeout, search_path, cancel)
    info = check_file(kernel)
    generation = info.generation
    pkg_dir = sdk.neuronxcc if generation == "classic" else sdk.nki if generation == "new" else None
    if pkg_dir is None or task is None or info.problems and any(p.severity == "error" for p in info.problems):
        return _embedded(kernel, task, kernel_name, target, timeout, search_path, cancel)
    backend = "neuronxcc.nki" if generation == "classic" else "nki"
    req = {"kernel": os.path.abspath(kernel), "task": os.path.abspath(task), "kernel_name": kernel_name,
           "default_kernel": info.kernels[0].name if info.kernels else None, "mode": mode, "generation": generation}
    env["PYTHONPATH"] = os.pathsep.join(x for x in (pkg_dir, env.get("PYTHONPATH", "")) if x)
    if target:
        env.setdefault("NEURON_PLATFORM_TARGET_OVERRIDE", target)
    cmd = [sys.executable, "-m", "nki_agent.diagnostics.compile_driver", json.dumps(req)]
    return _run(backend, cmd, timeout, env, kernel, f"{backend} {mode} in a subprocess")


def _neuronx_cc(exe: str, model: str, target: str | None, timeout: float, env: dict[str, str]) -> CompileResult:
    out = os.path.join(tempfile.gettempdir(), f"nki-agent-{os.getpid()}.neff")
    cmd = [exe, "compile", "--framework", "XLA", model, "--output", out]
    if target:
        cmd.append(f"--target={target}")
    return _run("neuronx-cc", cmd, timeout, env, model, "neuronx-cc compile")


def _run(backend: str, cmd: list[str], timeout: float, env: dict[str, str], kernel: str,
         detail: str) -> CompileResult:
    """Run ``cmd``, parse its output; diagnostics without a location land on ``kernel`` (kernel or model file)."""
    with tempfile.TemporaryFile() as log:
        try:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                  timeout=timeout, check=False)
            rc: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            rc = None
        except OSError as e:
            d = _note("sim_worker_crash", f"could not start {cmd[0]}: {e}", kernel)
            return CompileResult(backend, [d], False, cmd, None, detail)
        text = _read_bounded(log)
    source_text = _source(kernel) if kernel.endswith(".py") else None
    diags = parse_log(text, kernel, source_text)
    if rc is None:
        diags = [d for d in diags if d.severity != "info"]
        diags.append(_note("sim_timeout", f"{backend} did not finish within {timeout:g} s", kernel))
    elif rc == 0:
        diags = [d for d in diags if d.code != "log_unrecognized"]
    elif not [d for d in diags if d.severity == "error"]:
        tail = " | ".join(text.strip().splitlines()[-3:])[:400]
        diags = [_note("log_compile_failed", f"{backend} exited with status {rc}: {tail}", kernel)]
    ok = rc == 0 and not any(d.severity == "error" for d in diags)
    return CompileResult(backend, diags, ok, cmd, rc, detail)


def _read_bounded(f: Any) -> str:
    size = f.seek(0, os.SEEK_END)
    if size <= MAX_OUTPUT:
        f.seek(0)
        raw = f.read()
    else:
        f.seek(0)
        head = f.read(MAX_OUTPUT // 8)
        f.seek(size - (MAX_OUTPUT - MAX_OUTPUT // 8))
        raw = head + b"\n...\n" + f.read()
    return bytes(raw).decode("utf-8", errors="replace")


def _source(path: str) -> str | None:
    try:
        if os.path.getsize(path) > 5 * 1024 * 1024:
            return None
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _note(code: str, message: str, path: str) -> Diagnostic:
    from . import catalog

    return Diagnostic(code, "error", message, path, 1, 1, 1, 2, "nki-agent", catalog.doc_url(code))


def _embedded(kernel: str, task: str | None, kernel_name: str | None, target: str | None,
              timeout: float, search_path: Sequence[str] = (), cancel: threading.Event | None = None) -> CompileResult:
    if task:
        from ..toolchain import api

        res = api.simulate(kernel, task, target, kernel_name, timeout=timeout, cancel=cancel, search_path=search_path)
        diags = [from_problem(p, "nki-sim", kernel) for p in res.problem_list()]
        detail = "embedded NKI simulator"
    else:
        diags = [from_problem(p, "nki-check", kernel) for p in check_file(kernel).problems]
        detail = "embedded static check (no task given, nothing to trace)"
    ok = not any(d.severity == "error" for d in diags)
    return CompileResult(EMBEDDED, diags, ok, [], None, detail)


__all__ = ["EMBEDDED", "CompileResult", "Sdk", "compile_kernel", "detect"]
