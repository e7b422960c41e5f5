"""Jobs as Ray tasks (``runner serve --cluster``): ``RayExecutor``, an ``Executor`` of ``jobs.py`` on a Ray cluster.

``RayExecutor(address, backend)`` connects to ``ray://host:port`` (Ray Client), ``auto`` (the
cluster this host belongs to) or ``local`` (starts a Ray instance here; reuses one already started
in this process). Each job becomes one Ray task that asks for one NeuronCore (``neuron_cores: 1``,
the neuron backend, or any backend with ``pin_cores=True``: Ray then sets ``NEURON_RT_VISIBLE_CORES``
for the task) or one CPU (the simulator). Files do not travel by path: the task receives the
``JobRequest`` JSON and the job id, writes its own private job folder on the node it runs on
(``layout.prepare``: the kernel's and the task's bundles in two subfolders), builds the backend by name (``service.make_backend``, or ``module:Class`` for a
backend class of its own), runs it on the slot of its core (``node_slot``), removes the folder and
returns the result as JSON, which ``run`` parses back into the typed result. A task is never
retried (``max_retries=0``): a job that kills its worker would only kill the next one too.

Progress: "queued on the cluster" when the task is submitted; then the task's own messages
("running on node X, NeuronCore N", the backend's progress), relayed through one small async actor
(``ProgressHub``, no CPU) that ``run`` long-polls while it waits (Ray Client has no streaming
generators). Cancel: ``run`` waits with ``ray.wait(..., timeout=TICK_S)`` in a loop and, once the
job's cancel event is set, stops the task with ``ray.cancel(ref, force=True)`` (the worker process is
killed; bubblewrap's ``--die-with-parent`` takes the jail with it; its job folder is swept by the
next task on that node) → a ``sim_cancelled`` result. A task whose worker or node dies, or whose
result is lost → a ``sim_worker_crash`` result (never an exception out of ``run``; the job manager
does not cache it). A task that raises (a bug of the backend on the node) → ``RuntimeError``, the
same as a backend raising in-process (the job fails with the reason).

Concurrency: the job manager's worker threads bound it, one job per thread; run the service with
``--workers`` equal to ``RayExecutor.capacity`` (the cluster's ``neuron_cores``; CPUs for the
simulator): fewer leave cores idle, more only queue inside Ray. The threads' slots should be
``RayExecutor.slots(workers)`` (plain slots: the core is chosen on the node), not the backend's
slots of the service's own host. Nodes need the same ``nki-agent`` installed (or pass
``runtime_env``, e.g. ``{"py_modules": [...]}``). ``close()`` disconnects, and stops a local Ray it
started.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from typing import Any

import ray
from pydantic import TypeAdapter
from ray import exceptions as rex

from nki_agent.toolchain.protocol.jobs import (
    BaselineResult,
    CompileResult,
    JobResult,
    ProblemInfo,
    ProfileResult,
    SimulateResult,
    VerifyResult,
)
from .backends import Backend, PreparedJob, Progress, Slot
from .config import ConfigError
from .jobs import prepare
from .layout import BundledJobRequest

TICK_S = 0.2  # how often the wait loop looks at the job's cancel event
POLL_S = 10.0  # the longest a progress poll waits inside the hub
POST_WAIT_S = 5.0  # the longest a finished task waits for its progress messages to reach the hub
CANCEL_GRACE_S = 10.0  # after ray.cancel: how long to wait for the task to let go of its core
CORES_PER_DEVICE = 2  # trn1: two NeuronCores per /dev/neuronN (only when the backend does not say)
LOCAL_OBJECT_STORE_BYTES = 128 * 1024 * 1024  # results are small JSON texts
MAX_EVENTS = 200  # progress messages the hub keeps per job
_STANDARD = {f"{__package__}.backends.simulator": "simulator", f"{__package__}.backends.neuron": "neuron"}
_RESULTS: dict[str, type[Any]] = {"compile": CompileResult, "simulate": SimulateResult, "verify": VerifyResult,
                                  "profile": ProfileResult, "baseline": BaselineResult}
_ADAPTER: TypeAdapter[JobResult] = TypeAdapter(JobResult)


class ClusterError(ConfigError):
    """The cluster cannot be reached, or cannot run this executor's jobs (it declares no ``neuron_cores``)."""


# ------------------------------------------------------------------ backends and slots on the node


def backend_spec(backend: Backend) -> str:
    """How a node builds ``backend``: its name for the standard backends, else ``module:Class``."""
    cls = type(backend)
    return _STANDARD.get(cls.__module__) or f"{cls.__module__}:{cls.__qualname__}"


@functools.lru_cache(maxsize=8)
def build_backend(spec: str) -> Backend:
    """The backend ``spec`` names, one per worker process (as the service keeps one: probes run once)."""
    if ":" not in spec:
        from .service import make_backend

        return make_backend(spec)
    module, _, qualname = spec.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    backend: Backend = obj()
    return backend


def device_files(core_id: int, cores_per_device: int = CORES_PER_DEVICE) -> tuple[str, ...]:
    """The device file of a NeuronCore when the backend does not number its own (trn1: 2 cores a device)."""
    return (f"/dev/neuron{core_id // cores_per_device}",)


def node_slot(backend: Backend, index: int, core_id: int | None) -> Slot:
    """The slot of NeuronCore ``core_id`` on this node: the backend's own (its device files), else
    ``device_files``; a plain slot when the task holds no core."""
    if core_id is None:
        return Slot(index)
    with contextlib.suppress(Exception):  # a backend that cannot list its cores here: the default numbering
        for s in backend.slots(1024):
            if s.core_id == core_id and s.devices:
                return Slot(index, core_id, tuple(s.devices))
    return Slot(index, core_id, device_files(core_id))


def visible_core() -> int | None:
    """The NeuronCore Ray gave this task (``NEURON_RT_VISIBLE_CORES``, its first when it lists several;
    else Ray's own record, when the node opted out of setting the variable)."""
    value = os.environ.get("NEURON_RT_VISIBLE_CORES", "").split(",")[0].split("-")[0].strip()
    if not value.isdigit():
        with contextlib.suppress(Exception):
            value = str((ray.get_runtime_context().get_accelerator_ids().get("neuron_cores") or [""])[0])
    return int(value) if value.isdigit() else None


# ------------------------------------------------------------------ job folders on the node


def _jobs_root() -> str | None:
    """This user's private parent of job folders on the node (None when the name is taken by another)."""
    root = os.path.join(tempfile.gettempdir(), f"nki-agent-ray-jobs-{os.getuid()}")
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
        st = os.lstat(root)
    except OSError:
        return None
    if not os.path.isdir(root) or os.path.islink(root) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return root


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs: a zombie (exited, not yet reaped by its raylet) has finished with its folder."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rpartition(")")[2].split()[:1]
    except OSError:
        return True  # no procfs: kill(0) is all there is
    return state not in (["Z"], ["X"])


def sweep_orphans(root: str) -> None:
    """Remove job folders whose worker died (a cancelled or crashed task never ran its clean-up)."""
    for name in os.listdir(root):
        parts = name.split("-")
        if len(parts) >= 3 and parts[0] == "job" and parts[2].isdigit() and not _alive(int(parts[2])):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


# ------------------------------------------------------------------ the task and the progress hub


@ray.remote(num_cpus=0)
class ProgressHub:
    """Progress messages of running tasks, by job id, for ``RayExecutor.run`` to long-poll."""

    def __init__(self) -> None:
        self._events: dict[str, list[tuple[int, str]]] = {}
        self._dropped: OrderedDict[str, None] = OrderedDict()
        self._cond = asyncio.Condition()

    async def post(self, job_id: str, message: str) -> None:
        if job_id in self._dropped:
            return
        events = self._events.setdefault(job_id, [])
        events.append((events[-1][0] + 1 if events else 1, message))
        del events[:-MAX_EVENTS]
        async with self._cond:
            self._cond.notify_all()

    async def next(self, job_id: str, after: int, timeout: float) -> list[tuple[int, str]]:
        """Messages after ``after``, waiting up to ``timeout`` seconds for the first."""

        def new() -> list[tuple[int, str]]:
            return [e for e in self._events.get(job_id, []) if e[0] > after]

        async with self._cond:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._cond.wait_for(lambda: bool(new()) or job_id in self._dropped),
                                       timeout)
        return new()

    async def drop(self, job_id: str) -> None:
        self._events.pop(job_id, None)
        self._dropped[job_id] = None
        while len(self._dropped) > 10000:
            self._dropped.popitem(last=False)
        async with self._cond:
            self._cond.notify_all()


def run_on_node(request_json: str, job_id: str, spec: str, index: int, pinned: bool, hub: Any) -> str:
    """The Ray task: one job in a private folder of the node it runs on; the result as JSON."""
    request = BundledJobRequest.model_validate_json(request_json)
    sent: list[Any] = []

    def post(message: str) -> None:
        with contextlib.suppress(Exception):  # progress is best effort; the job goes on without it
            sent.append(hub.post.remote(job_id, message))

    backend = build_backend(spec)
    core_id = visible_core() if pinned else None
    slot = node_slot(backend, index, core_id)
    node = ray.get_runtime_context().get_node_id()
    post(f"running on node {ray.util.get_node_ip_address()} ({node[:8]})"
         + (f", NeuronCore {core_id}" if core_id is not None else ""))
    root = _jobs_root()
    if root is not None:
        sweep_orphans(root)
    folder = tempfile.mkdtemp(prefix=f"job-{job_id[:8]}-{os.getpid()}-", dir=root)
    try:
        result = backend.run(prepare(job_id, request, folder), slot, threading.Event(), post)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        # every message is in the hub before the result is: the executor relays them all first
        with contextlib.suppress(Exception):
            if sent:
                ray.wait(sent, num_returns=len(sent), timeout=POST_WAIT_S)
    return result.model_dump_json()


_task = ray.remote(run_on_node)


def failure(job: PreparedJob, code: str, message: str, backend: str) -> JobResult:
    """A result of the job's op that carries one problem (cancelled, crashed)."""
    r = job.request
    result: JobResult = _RESULTS[r.op](kernel=job.kernel_path, task=job.task_path, target=r.target or "",
                                       backend=backend, problems=[ProblemInfo(code=code, message=message)])
    return result


# ------------------------------------------------------------------ the executor


class RayExecutor:
    """Runs each job as a Ray task (see the module docstring); safe to call from many threads."""

    def __init__(self, address: str, backend: Backend, *, pin_cores: bool | None = None, num_cpus: float = 1.0,
                 local_cpus: int | None = None, local_neuron_cores: int | None = None,
                 temp_dir: str | None = None, runtime_env: dict[str, Any] | None = None) -> None:
        """``pin_cores``: ask for one ``neuron_cores`` per task (default: for the neuron backend only).
        ``local_*`` / ``temp_dir``: resources and temp folder of a Ray instance ``local`` starts (default:
        this host's CPUs; NeuronCores as Ray detects them). ``runtime_env``: passed to ``ray.init``, or
        to each task when this process was connected already."""
        self.address = address
        self.backend_name = backend.name
        self.spec = backend_spec(backend)
        self.pin = backend.name == "neuron" if pin_cores is None else pin_cores
        self.num_cpus = num_cpus
        self.owned = not ray.is_initialized()  # a process talks to one Ray cluster: one started here is reused
        self.task_env = None if self.owned else runtime_env
        self._closed = False
        if self.owned:
            try:
                if address == "local":
                    resources = {"neuron_cores": float(local_neuron_cores)} if local_neuron_cores else None
                    ray.init(num_cpus=local_cpus, resources=resources, include_dashboard=False,
                             _temp_dir=temp_dir, object_store_memory=LOCAL_OBJECT_STORE_BYTES, log_to_driver=False,
                             runtime_env=runtime_env, namespace="nki-agent")
                else:
                    ray.init(address=address, runtime_env=runtime_env, log_to_driver=False, namespace="nki-agent")
            except Exception as e:  # unreachable, refused, bad address: the runner does not start
                self.close()
                raise ClusterError(f"cannot start or reach the Ray cluster {address!r}: {type(e).__name__}: {e}"
                                   ) from e
        try:
            if self.pin and self.capacity < 1:
                raise ClusterError(f"the Ray cluster at {address!r} declares no neuron_cores: start its nodes on "
                                   "Trainium hosts (or with --resources='{\"neuron_cores\": N}')")
            self.hub = ProgressHub.remote()  # type: ignore[attr-defined]
        except BaseException:
            self.close()
            raise

    @property
    def capacity(self) -> int:
        """How many jobs the cluster runs at once: its ``neuron_cores`` (pinned), else CPUs / ``num_cpus``
        — the ``--workers`` to give the service."""
        res = ray.cluster_resources()
        if self.pin:
            return int(res.get("neuron_cores", 0))
        return int(res.get("CPU", 0) // max(self.num_cpus, 1e-9))

    def close(self) -> None:
        """Disconnect (stopping a local Ray this executor started); a no-op the second time."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):  # closing never fails the caller
            if self.owned:
                ray.shutdown()
            elif ray.is_initialized() and getattr(self, "hub", None) is not None:
                ray.kill(self.hub)

    def slots(self, workers: int) -> list[Slot]:
        """The job manager's slots for this executor: ``workers`` plain ones (the core is chosen on the
        node), not the slots of this host's own NeuronCores."""
        return [Slot(i) for i in range(max(1, workers))]

    # ------------------------------------------------------------------ Executor

    def run(self, job: PreparedJob, slot: Slot, cancel: threading.Event, progress: Progress) -> JobResult:
        if cancel.is_set():
            return failure(job, "sim_cancelled", "cancelled before it reached the cluster", self.backend_name)
        options: dict[str, Any] = {"num_cpus": self.num_cpus, "max_retries": 0, "name": f"nki-job-{job.id[:8]}"}
        if self.pin:
            options["resources"] = {"neuron_cores": 1}
        if self.task_env:
            options["runtime_env"] = self.task_env
        try:
            ref = _task.options(**options).remote(job.request.model_dump_json(), job.id, self.spec, slot.index,
                                                  self.pin, self.hub)
        except Exception as e:  # noqa: BLE001 - the cluster is gone: a crash of this job, not of the slot
            return self._crash(job, "could not submit the job to the cluster", e)
        progress("queued on the cluster (waiting for " + ("a free NeuronCore)" if self.pin else "a free CPU)"))
        try:
            return self._wait(ref, job, cancel, progress)
        finally:
            self._drop(job.id)

    # ------------------------------------------------------------------ internals

    def _wait(self, ref: Any, job: PreparedJob, cancel: threading.Event, progress: Progress) -> JobResult:
        seq = 0
        poll: Any = self._poll(job.id, seq)
        while True:
            try:
                ready, _ = ray.wait([ref] if poll is None else [ref, poll], num_returns=1, timeout=TICK_S)
            except Exception as e:  # noqa: BLE001 - the connection to the cluster is lost
                return self._crash(job, "lost the cluster while waiting for the job", e)
            if ref in ready:
                break
            if cancel.is_set():
                return self._cancel(ref, job)
            if poll is not None and poll in ready:
                try:
                    events = ray.get(poll)
                except Exception:  # noqa: BLE001 - the hub is gone: the job goes on without progress
                    poll = None
                    continue
                for seq, message in events:
                    progress(message)
                poll = self._poll(job.id, seq)
        with contextlib.suppress(Exception):  # the task's last messages (it waited until the hub had them)
            for _, message in ray.get(self.hub.next.remote(job.id, seq, 0.0), timeout=POST_WAIT_S):
                progress(message)
        try:
            text = ray.get(ref)
        except rex.TaskCancelledError:
            return failure(job, "sim_cancelled", "the job's Ray task was cancelled", self.backend_name)
        except rex.RayTaskError as e:  # the backend raised on the node: the job fails, as it would here
            raise RuntimeError(f"the job raised on the cluster: {e.cause!r}") from None
        except Exception as e:  # noqa: BLE001 - worker or node died, result lost, cluster gone
            return self._crash(job, "the Ray worker running the job died", e)
        return _ADAPTER.validate_json(text)

    def _poll(self, job_id: str, after: int) -> Any:
        try:
            return self.hub.next.remote(job_id, after, POLL_S)
        except Exception:  # noqa: BLE001 - no progress, the job still runs
            return None

    def _drop(self, job_id: str) -> None:
        with contextlib.suppress(Exception):  # the hub is gone already
            self.hub.drop.remote(job_id)

    def _cancel(self, ref: Any, job: PreparedJob) -> JobResult:
        with contextlib.suppress(Exception):  # the task is gone either way
            ray.cancel(ref, force=True)
            ray.wait([ref], timeout=CANCEL_GRACE_S)  # its core is free again before the slot takes a job
        return failure(job, "sim_cancelled", "cancelled by the client (the job's Ray task was stopped)",
                       self.backend_name)

    def _crash(self, job: PreparedJob, what: str, e: BaseException) -> JobResult:
        detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return failure(job, "sim_worker_crash", f"{what} ({type(e).__name__}{': ' + detail if detail else ''})",
                       self.backend_name)
