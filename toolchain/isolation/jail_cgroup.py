"""Per-job control groups: memory (tmpfs pages included), tasks (threads included) and CPU of one jail.

``host()`` finds, once per process, where this machine lets us create a control group per job:

- **v2**: a cgroup2 folder whose ``cgroup.subtree_control`` has (or accepts) ``memory`` and ``pids`` and
  where we may create children — ``NKI_AGENT_CGROUP=/sys/fs/cgroup/…`` names one (a folder delegated to
  the user, e.g. by systemd's ``Delegate=yes``), else our own cgroup is tried;
- **v1**: writable ``memory`` and ``pids`` hierarchies at our own cgroup's path (root on a v1 or
  hybrid host, e.g. a container whose cgroupfs is mounted read-write);
- else none, with the reason: the jail then relies on the fallback (``worker.py``: ``RLIMIT_AS``,
  ``RLIMIT_NPROC`` — which counts the jail's own tasks, per user namespace, for a non-root user — and
  a thread cap; tmpfs sizes counted in the budget). ``NKI_AGENT_CGROUP=off`` forces the fallback.

``JobGroup`` is one job's group (``nki-agent-<pid>-<n>`` under the parent): ``memory.max`` /
``memory.limit_in_bytes``, ``pids.max`` and, where the ``cpu`` controller is there, a CPU quota. The
jail enters it before bwrap starts: ``wrap(argv)`` prefixes ``/bin/sh``, which writes ``0`` (itself)
into each ``cgroup.procs`` and then ``exec``s bwrap, so every process and thread of the jail is
counted from its first instruction (exit status 125 and a line on stderr if it cannot join).
Memory charged to the group includes the pages of the jail's tmpfs mounts (``/job``, ``/tmp``,
``/dev/shm``), SysV/POSIX shared memory and the page cache it touches. ``close()`` kills what is
left and removes the group (retrying from a daemon thread while the jail's processes exit); the first
``host()`` of a process removes empty groups left by tools that died.
"""

from __future__ import annotations

import functools
import itertools
import os
import signal
import threading
from dataclasses import dataclass

ENV = "NKI_AGENT_CGROUP"  # "off": no cgroup (the fallback); a path: the parent group to create jobs under
PREFIX = "nki-agent-"
JOIN_FAILED = 125  # exit status of the wrapper when it cannot enter the job's group
CPU_PERIOD_US = 100_000
REMOVE_TRIES = 600  # x 0.05 s: how long a daemon thread keeps trying to remove a group whose jail is exiting
_counter = itertools.count()


@dataclass(frozen=True)
class Host:
    """Where job groups go: ``mode`` "v2" (``parents`` = one folder) or "v1" (one folder per controller:
    memory, pids, and cpu when writable), or "" with the ``reason`` (the fallback applies)."""

    mode: str
    parents: tuple[tuple[str, str], ...] = ()  # (controller, folder); v2: (("unified", folder),)
    reason: str = ""

    @property
    def available(self) -> bool:
        return bool(self.mode)


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _write(path: str, value: str) -> bool:
    try:
        with open(path, "w") as f:
            f.write(value)
        return True
    except OSError:
        return False


def _mounts() -> list[tuple[str, str, str, str]]:
    """(mount point, root inside the hierarchy, fs type, super options) of every cgroup mount."""
    out = []
    for line in _read("/proc/self/mountinfo").splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            out.append((fields[4], fields[3], tail[0], tail[2]))
    return out


def _own(self_cgroup: str) -> dict[str, str]:
    """Controller (or "" for v2) -> our cgroup path, from /proc/self/cgroup."""
    out: dict[str, str] = {}
    for line in self_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for c in parts[1].split(",") if parts[1] else [""]:
                out[c] = parts[2]
    return out


def _under(mount: str, root: str, path: str) -> str:
    rel = os.path.relpath(path, root) if root != "/" and path.startswith(root) else path.lstrip("/")
    return os.path.normpath(os.path.join(mount, rel)) if rel not in (".", "") else mount


def _can_create(parent: str) -> bool:
    probe = os.path.join(parent, f"{PREFIX}probe-{os.getpid()}-{next(_counter)}")
    try:
        os.mkdir(probe)
    except OSError:
        return False
    try:
        os.rmdir(probe)
    except OSError:
        pass
    return True


def _v2(parent: str) -> str:
    """"" if ``parent`` can hold job groups with memory and pids, else why not."""
    if not os.path.isfile(os.path.join(parent, "cgroup.controllers")):
        return f"{parent} is not a cgroup2 folder"
    have = set(_read(os.path.join(parent, "cgroup.controllers")).split())
    if not {"memory", "pids"} <= have:
        return f"the memory and pids controllers are not available in {parent} (it has: {' '.join(sorted(have)) or 'none'})"
    enabled = set(_read(os.path.join(parent, "cgroup.subtree_control")).split())
    want = {"memory", "pids"} | ({"cpu"} & have)
    if not want <= enabled:
        _write(os.path.join(parent, "cgroup.subtree_control"), " ".join(f"+{c}" for c in sorted(want - enabled)))
    if not {"memory", "pids"} <= set(_read(os.path.join(parent, "cgroup.subtree_control")).split()):
        return f"cannot enable memory and pids for children of {parent} (a cgroup with processes, or not delegated)"
    if not _can_create(parent):
        return f"cannot create a cgroup under {parent}"
    return ""


@functools.lru_cache(maxsize=4)
def _host(setting: str) -> Host:
    if setting.lower() in ("off", "0", "no", "none"):
        return Host("", reason=f"{ENV}={setting}: cgroups turned off")
    if setting:
        if os.path.isfile(os.path.join(setting, "cgroup.controllers")):
            why = _v2(setting)
            return Host("v2", (("unified", setting),)) if not why else Host("", reason=why)
        return Host("", reason=f"{ENV}={setting} is not a cgroup2 folder")
    own = _own(_read("/proc/self/cgroup"))
    reasons = []
    for mount, root, fstype, _opts in _mounts():
        if fstype == "cgroup2" and "" in own:
            parent = _under(mount, root, own[""])
            why = _v2(parent)
            if not why:
                return Host("v2", (("unified", parent),))
            reasons.append(why)
    v1: dict[str, str] = {}
    for mount, root, fstype, opts in _mounts():
        if fstype != "cgroup":
            continue
        for c in ("memory", "pids", "cpu"):
            if c in opts.split(",") and c in own and c not in v1:
                v1[c] = _under(mount, root, own[c])
    if "memory" in v1 and "pids" in v1:
        usable = {c: p for c, p in v1.items() if _can_create(p)}
        if "memory" in usable and "pids" in usable:
            return Host("v1", tuple(sorted(usable.items())))
        reasons.append("the cgroup v1 memory and pids hierarchies are not writable")
    return Host("", reason="; ".join(reasons) or "no cgroup hierarchy with memory and pids controllers")


def host() -> Host:
    """Where job groups can be made here (probed once per ``NKI_AGENT_CGROUP`` value and process)."""
    where = _host(os.environ.get(ENV, "").strip())
    if where.available and where not in _swept:
        _swept.add(where)
        _sweep(where)
    return where


_swept: set[Host] = set()


def _sweep(where: Host) -> None:
    """Remove the empty groups of tools that died without removing them (``nki-agent-<pid>-<n>``, pid gone)."""
    for _controller, parent in where.parents:
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            pid = name[len(PREFIX):].split("-", 1)[0] if name.startswith(PREFIX) else ""
            if pid.isdigit() and int(pid) != os.getpid() and not os.path.exists(f"/proc/{pid}"):
                try:
                    os.rmdir(os.path.join(parent, name))
                except OSError:
                    pass


class JobGroup:
    """One job's control group(s): limits written at creation; ``wrap`` puts the jail into them."""

    def __init__(self, where: Host, memory_bytes: int, tasks: int, cpus: float = 1.0) -> None:
        self.mode = where.mode
        self.memory_bytes, self.tasks = int(memory_bytes), int(tasks)
        name = f"{PREFIX}{os.getpid()}-{next(_counter)}"
        self.dirs: dict[str, str] = {}
        try:
            for controller, parent in where.parents:
                d = os.path.join(parent, name)
                os.mkdir(d)
                self.dirs[controller] = d
            self._limit(cpus)
        except OSError:
            self.close()
            raise

    def _limit(self, cpus: float) -> None:
        quota = str(max(1000, int(CPU_PERIOD_US * cpus)))
        if self.mode == "v2":
            d = self.dirs["unified"]
            writes = [("memory.max", str(self.memory_bytes)), ("memory.swap.max", "0"), ("pids.max", str(self.tasks))]
            if os.path.exists(os.path.join(d, "cpu.max")):
                writes.append(("cpu.max", f"{quota} {CPU_PERIOD_US}"))
            optional = {"memory.swap.max", "cpu.max"}
            for fname, value in writes:
                if not _write(os.path.join(d, fname), value) and fname not in optional:
                    raise OSError(f"cannot set {fname} of {d}")
            return
        if not _write(os.path.join(self.dirs["memory"], "memory.limit_in_bytes"), str(self.memory_bytes)):
            raise OSError(f"cannot set memory.limit_in_bytes of {self.dirs['memory']}")
        _write(os.path.join(self.dirs["memory"], "memory.memsw.limit_in_bytes"), str(self.memory_bytes))
        if not _write(os.path.join(self.dirs["pids"], "pids.max"), str(self.tasks)):
            raise OSError(f"cannot set pids.max of {self.dirs['pids']}")
        if "cpu" in self.dirs:
            _write(os.path.join(self.dirs["cpu"], "cpu.cfs_period_us"), str(CPU_PERIOD_US))
            _write(os.path.join(self.dirs["cpu"], "cpu.cfs_quota_us"), quota)

    @property
    def procs(self) -> tuple[str, ...]:
        return tuple(os.path.join(d, "cgroup.procs") for d in self.dirs.values())

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started from inside the group: a shell joins every group, then ``exec``s it."""
        script = ('while [ "$1" != -- ]; do printf 0 > "$1" || { echo "nki-agent: cannot join the job\'s cgroup '
                  f'$1" >&2; exit {JOIN_FAILED}; }}; shift; done; shift; exec "$@"')
        return ["/bin/sh", "-c", script, "nki-cgroup", *self.procs, "--", *argv]

    def usage(self) -> dict[str, int | str]:
        """What the group measured: its mode, limits, peak memory and refused task creations, as known."""
        out: dict[str, int | str] = {"cgroup": self.mode, "memory_max": self.memory_bytes, "tasks_max": self.tasks}
        mem = self.dirs.get("unified") or self.dirs.get("memory") or ""
        pids = self.dirs.get("unified") or self.dirs.get("pids") or ""
        peak = _read(os.path.join(mem, "memory.peak" if self.mode == "v2" else "memory.max_usage_in_bytes")).strip()
        if peak.isdigit():
            out["memory_peak"] = int(peak)
        ppeak = _read(os.path.join(pids, "pids.peak")).strip()
        if ppeak.isdigit():
            out["tasks_peak"] = int(ppeak)
        for line in _read(os.path.join(pids, "pids.events")).splitlines():
            key, _, value = line.partition(" ")
            if key == "max" and value.strip().isdigit():
                out["tasks_refused"] = int(value)
        oom = _read(os.path.join(mem, "memory.events" if self.mode == "v2" else "memory.oom_control"))
        for line in oom.splitlines():
            key, _, value = line.partition(" ")
            if key in ("oom_kill", "oom_kill ") and value.strip().isdigit():
                out["oom_kills"] = int(value)
        return out

    def close(self) -> None:
        """Kill whatever is still in the group and remove it (now, else from a daemon thread)."""
        if not self.dirs:
            return
        dirs, self.dirs = list(self.dirs.values()), {}
        if not _remove(dirs):
            threading.Thread(target=_remove_later, args=(dirs,), name="nki-cgroup-remove", daemon=True).start()


def _kill(d: str) -> None:
    if _write(os.path.join(d, "cgroup.kill"), "1"):
        return
    for pid in _read(os.path.join(d, "cgroup.procs")).split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ValueError, OSError):
            pass


def _remove(dirs: list[str]) -> bool:
    left = []
    for d in dirs:
        try:
            os.rmdir(d)
        except FileNotFoundError:
            pass
        except OSError:
            _kill(d)
            left.append(d)
    dirs[:] = left
    return not left


def _remove_later(dirs: list[str]) -> None:
    done = threading.Event()
    for _ in range(REMOVE_TRIES):
        if _remove(dirs):
            return
        done.wait(0.05)
