"""The audit-hook tripwire of the kernel worker: what untrusted kernel code may not do there.

``install`` adds a ``sys.addaudithook`` hook (hooks cannot be removed) that refuses, for the rest of
the process: writing or changing files outside the worker's output directory; reading the expected
outputs, the task file (or its cached bytecode, which ``import`` reads instead of the source) or
process memory; starting processes; network connections; ctypes; frame, trace and garbage-collector
introspection from code that is not the toolchain's own. A refused event raises ``SandboxViolation``
(a ``PermissionError``) in the code that tried it.

It gives an attempt a clear ``sim_sandbox_violation`` message; the boundary is the OS jail
(``jail.py``) and the parent-side verdict (``judge.py``): see docs/toolchain.md.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from types import FrameType
from typing import Any

_STDLIB = os.path.abspath(sysconfig.get_paths()["stdlib"])
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the toolchain folder
_HERE = __file__

# events refused outright: processes, network, native code, introspection that reaches other code's state
_DENY_PREFIXES = ("ctypes.", "socket.", "sqlite3.", "winreg.", "_winapi.")
_DENY = frozenset({
    "os.system", "subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "pty.spawn", "_posixsubprocess.fork_exec", "os.kill", "os.killpg", "os.startfile",
    "sys.settrace", "sys.setprofile", "sys._current_frames", "sys.addaudithook", "sys._getframemodulename",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "resource.setrlimit", "resource.prlimit",
    "mmap.__new__",
})
# frame-bearing attributes ("object.__getattr__" events): only the toolchain may follow them
_FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back"})
# events that change the file system: every path argument must lie inside the output directory
_FS_CHANGES = frozenset({
    "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate", "os.link",
    "os.symlink", "os.utime", "os.chflags", "os.lchflags", "os.lchmod", "os.mkfifo", "os.mknod",
    "os.setxattr", "os.removexattr",
})
_LISTING = frozenset({"os.listdir", "os.scandir", "glob.glob", "glob.glob/2"})
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class SandboxViolation(PermissionError):
    """Raised in kernel code for an operation the sandbox refuses."""


class _Guard:
    """The hook. Nothing refers to it but the interpreter's hook list: kernel code cannot reach it
    (frames and the garbage collector are refused to it) and its settings are immutable strings."""

    def __init__(self, out_dir: str, secrets: list[str]) -> None:
        self.out_dir = os.path.realpath(out_dir)
        self.secrets = tuple(os.path.realpath(p) for p in secrets)
        # (folder, module stem) of each secret source file: its bytecode is the same secret
        self.sources = tuple((os.path.dirname(s), os.path.basename(s)[:-3]) for s in self.secrets if s.endswith(".py"))
        self.busy = False  # the hook's own frame walk raises audit events; they must not re-enter it

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if self.busy:
            return
        self.busy = True
        try:
            reason = self._check(event, args)
        finally:
            self.busy = False
        if reason:
            _violations.append(reason)
            raise SandboxViolation(f"the sandbox forbids {reason}")

    def _check(self, event: str, args: tuple[Any, ...]) -> str:
        if event == "open":
            return self._open(args)
        if event == "sys._getframe":
            return "" if _toolchain_caller() else "frame introspection (sys._getframe)"
        if event == "object.__getattr__":
            name = args[1] if len(args) > 1 else ""
            if name in _FRAME_ATTRS and not _toolchain_caller():
                return f"frame introspection (.{name})"
            return ""
        if event in _DENY or event.startswith(_DENY_PREFIXES):
            return f"{event}"
        if event in _FS_CHANGES or event.startswith("shutil."):
            for p in _paths(args):
                if not self._inside(p, self.out_dir):
                    return f"{event} on {p}"
            return ""
        if event in _LISTING:
            for p in _paths(args[:1]):
                if self._secret(p):
                    return f"{event} of {p}"
        return ""

    def _open(self, args: tuple[Any, ...]) -> str:
        path, mode, flags = (list(args) + [None, None, None])[:3]
        if isinstance(path, int) or path is None:
            return ""  # an already-open descriptor: nothing new is reached
        p = _as_path(path)
        if p is None:
            return ""
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
            (isinstance(flags, int) and bool(flags & _WRITE_FLAGS))
        if self._secret(p):
            return f"opening {p}"
        if writing and not self._inside(p, self.out_dir):
            return f"writing {p}"
        return ""

    def _secret(self, p: str) -> bool:
        real = os.path.realpath(p)
        if real.startswith("/proc/") and not real.startswith("/proc/self/fd"):
            parts = real.split("/")
            if len(parts) > 3 and parts[3] in ("mem", "maps", "pagemap", "environ", "cmdline", "map_files"):
                return True
        return any(real == s or real.startswith(s + os.sep) for s in self.secrets) or self._bytecode_of_secret(real)

    def _bytecode_of_secret(self, real: str) -> bool:
        """``dir/__pycache__/stem.<tag>.pyc`` or a legacy ``dir/stem.pyc`` of a secret ``dir/stem.py``."""
        if not real.endswith(".pyc"):
            return False
        folder, name = os.path.split(real)
        if os.path.basename(folder) == "__pycache__":
            folder = os.path.dirname(folder)
        elif "." in name[:-4]:
            return False
        return any(folder == d and name.startswith(stem + ".") for d, stem in self.sources)

    @staticmethod
    def _inside(p: str, directory: str) -> bool:
        real = os.path.realpath(p)
        return real == directory or real.startswith(directory + os.sep)


def _as_path(x: Any) -> str | None:
    try:
        return os.fsdecode(x) if isinstance(x, (str, bytes, os.PathLike)) else None
    except (TypeError, ValueError):
        return None


def _paths(args: tuple[Any, ...]) -> list[str]:
    return [p for p in (_as_path(a) for a in args) if p is not None]


class _Probe(Exception):
    """Raised and caught by the guard to find the frame that triggered an event."""


def _toolchain_caller() -> bool:
    """True when the code behind the current event is the toolchain's own (standard-library frames
    in between are skipped: ``inspect.currentframe()`` counts as a call by its caller)."""
    try:
        raise _Probe
    except _Probe as e:
        tb = e.__traceback__
    frame: FrameType | None = tb.tb_frame if tb is not None else None
    while frame is not None and (frame.f_code.co_filename == _HERE or _stdlib(frame.f_code.co_filename)):
        frame = frame.f_back
    if frame is None:
        return True  # nothing but the interpreter and the standard library on the stack
    path = os.path.abspath(frame.f_code.co_filename)
    return path.startswith(_PACKAGE + os.sep)


def _stdlib(filename: str) -> bool:
    return filename.startswith("<frozen ") or os.path.abspath(filename).startswith(_STDLIB + os.sep)


_violations: list[str] = []


def install(out_dir: str, secrets: list[str]) -> None:
    """Guard the rest of this process: writes only under ``out_dir``, never touch ``secrets``."""
    sys.addaudithook(_Guard(out_dir, secrets))  # no other reference: kernel code cannot reach it


def violations() -> list[str]:
    """What the guard refused so far (for the report; kernel code could clear it, the refusal stands)."""
    return list(_violations)
