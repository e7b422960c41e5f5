"""The Ray executor (``runner/cluster.py``) on one local Ray cluster that declares two NeuronCores.

One module-scoped cluster (Ray takes seconds to start): 2 CPUs, ``neuron_cores: 2``, no dashboard,
its temp folder inside pytest's, bound to 127.0.0.1 only, token auth with a token of this test (none
written to ``~/.ray``). The probe backend (``cluster_probe.py``) reaches the workers through
``runtime_env``'s ``PYTHONPATH``.
"""

from __future__ import annotations

import inspect
import json
import os
import secrets
import select
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Read when Ray is imported: a "cluster" of this host only (every Ray service on 127.0.0.1), with token
# auth by a token of this test module in the environment (Ray would otherwise write one to ~/.ray).
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
SET_HERE = [k for k in RAY_ENV if k not in os.environ]
for _k in SET_HERE:
    os.environ[_k] = RAY_ENV[_k]
ray = pytest.importorskip("ray")

from cluster_probe import ProbeBackend, kernel
from fastapi.testclient import TestClient
from neuron_helpers import FAKE, example_kernel, fake_device, small_add_task
from nki_agent.runner import cluster
from nki_agent.runner.backends import PreparedJob, Slot
from nki_agent.runner.backends.baseline import SDK_PATH_VAR
from nki_agent.runner.backends.neuron import NeuronBackend
from nki_agent.runner.backends.simulator import SimulatorBackend
from nki_agent.runner.config import RunnerConfig
from nki_agent.runner.jobs import prepare
from nki_agent.runner.service import build
from nki_agent.toolchain import api
from nki_agent.toolchain.isolation import jail
from nki_agent.toolchain.protocol.jobs import JobRequest, JobResult, SourceFile, VerifyResult

HERE = Path(__file__).resolve().parent
ADD = HERE.parents[1] / "examples" / "l1_add"
TIMES: dict[str, float] = {}


@pytest.fixture(scope="module")
def executor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster.RayExecutor]:
    """The cluster, started by an executor of the probe backend that asks for a NeuronCore per job."""
    assert not ray.is_initialized()
    t0 = time.monotonic()
    ex = cluster.RayExecutor("local", ProbeBackend(), pin_cores=True, local_cpus=2, local_neuron_cores=2,
                             temp_dir=str(tmp_path_factory.mktemp("ray")),
                             runtime_env={"env_vars": {"PYTHONPATH": str(HERE)}})
    TIMES["ray start-up"] = time.monotonic() - t0
    try:
        yield ex
    finally:
        t0 = time.monotonic()
        ex.close()
        TIMES["ray shutdown"] = time.monotonic() - t0
        print(f"\nRay: {', '.join(f'{k} {v:.2f} s' for k, v in TIMES.items())}")
        for k in SET_HERE:
            os.environ.pop(k, None)
    assert not ray.is_initialized()


def job(tmp_path: Path, text: str, op: str = "verify", task: str | None = None, name: str = "kernel.py",
        **settings: Any) -> PreparedJob:
    request = JobRequest(op=op, kernel=SourceFile(name=name, text=text),  # type: ignore[arg-type]
                         task=SourceFile(name="task.py", text=task) if task else None, **settings)
    folder = tmp_path / uuid.uuid4().hex[:8]
    folder.mkdir()
    return prepare(uuid.uuid4().hex, request, str(folder))


def run(ex: cluster.RayExecutor, prepared: PreparedJob, cancel: threading.Event | None = None,
        events: list[str] | None = None) -> JobResult:
    return ex.run(prepared, Slot(0), cancel or threading.Event(),
                  (events if events is not None else []).append)


def facts(result: JobResult) -> dict[str, Any]:
    assert not result.problems, result.problems
    out: dict[str, Any] = json.loads(result.stderr)
    return out


def test_the_local_cluster_is_loopback_only_and_declares_two_cores(executor: cluster.RayExecutor) -> None:
    assert executor.owned and executor.pin and executor.capacity == 2
    assert executor.spec == "cluster_probe:ProbeBackend"
    assert [n["NodeManagerAddress"] for n in ray.nodes()] == ["127.0.0.1"]
    assert os.environ["RAY_AUTH_MODE"] == "token" and os.environ.get("RAY_AUTH_TOKEN")


def test_a_job_runs_in_its_own_folder_on_the_node_and_reports_where(executor: cluster.RayExecutor,
                                                                    tmp_path: Path) -> None:
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    events: list[str] = []
    prepared = job(tmp_path, kernel(do="env", barrier=str(barrier), n=1))
    result = run(executor, prepared, events=events)
    got = facts(result)
    assert got["written"] and got["folder"] != prepared.folder and not os.path.exists(got["folder"])
    assert got["cores"] in ("0", "1") and got["core_id"] == int(got["cores"])
    assert got["devices"] == ["/dev/neuron0"]  # cores 0 and 1 share device 0 (trn1 numbering)
    assert events[0].startswith("queued on the cluster")
    assert any(e.startswith("running on node 127.0.0.1") and e.endswith(f"NeuronCore {got['core_id']}")
               for e in events), events


def test_two_jobs_at_once_run_on_different_neuron_cores(executor: cluster.RayExecutor, tmp_path: Path) -> None:
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    jobs = [job(tmp_path, kernel(do="env", barrier=str(barrier), n=2)) for _ in range(2)]
    results: list[JobResult] = []
    threads = [threading.Thread(target=lambda j=j: results.append(run(executor, j))) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    got = [facts(r) for r in results]
    assert len(got) == 2 and all(g["together"] == 2 for g in got)  # both reached the barrier: at once
    assert sorted(g["cores"] for g in got) == ["0", "1"]
    assert got[0]["pid"] != got[1]["pid"]


def test_cancel_stops_a_long_job_and_the_next_job_runs(executor: cluster.RayExecutor, tmp_path: Path) -> None:
    cancel, blocking = threading.Event(), threading.Event()
    events: list[str] = []

    def progress(message: str) -> None:
        events.append(message)
        if message == "probe: blocking":
            blocking.set()

    out: list[JobResult] = []
    blocked = job(tmp_path, kernel(do="block"))
    t = threading.Thread(target=lambda: out.append(executor.run(blocked, Slot(0), cancel, progress)))
    t.start()
    assert blocking.wait(60), events  # the backend's own progress comes back from the node
    root = cluster._jobs_root()
    assert root is not None
    orphans = {n for n in os.listdir(root) if n.startswith(f"job-{blocked.id[:8]}-")}
    assert len(orphans) == 1  # the blocked job's folder on the node
    t0 = time.monotonic()
    cancel.set()
    t.join(30)
    TIMES["cancel"] = time.monotonic() - t0
    assert not t.is_alive()  # the cancel returned (how fast is printed with the module's timings, not asserted)
    assert [p.code for p in out[0].problems] == ["sim_cancelled"]
    assert out[0].op == "verify" and not out[0].correct
    # Ray answers the cancel before the killed worker has exited on a loaded machine: wait for its exit (an
    # event: its pidfd turns readable), then the next task on the node must sweep its folder
    _wait_exit(int(next(iter(orphans)).split("-")[2]))
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    assert facts(run(executor, job(tmp_path, kernel(do="env", barrier=str(barrier), n=1))))["written"]
    assert not orphans & set(os.listdir(root))  # the killed task's folder was swept by the next task


def _wait_exit(pid: int) -> None:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        assert select.select([fd], [], [], 60)[0], f"the cancelled job's worker {pid} did not exit"
    finally:
        os.close(fd)


def test_a_worker_that_dies_is_a_crash_result_and_the_executor_goes_on(executor: cluster.RayExecutor,
                                                                        tmp_path: Path) -> None:
    result = run(executor, job(tmp_path, kernel(do="exit"), op="simulate"))
    assert result.op == "simulate" and [p.code for p in result.problems] == ["sim_worker_crash"]
    assert "died" in result.problems[0].message
    with pytest.raises(RuntimeError, match="deliberate bug"):  # a backend's bug fails the job, as locally
        run(executor, job(tmp_path, kernel(do="raise")))
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    assert facts(run(executor, job(tmp_path, kernel(do="env", barrier=str(barrier), n=1))))["written"]


def test_a_job_cancelled_before_it_starts_never_reaches_the_cluster(executor: cluster.RayExecutor,
                                                                    tmp_path: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    events: list[str] = []
    result = run(executor, job(tmp_path, kernel(do="exit")), cancel, events)
    assert [p.code for p in result.problems] == ["sim_cancelled"] and events == []


@pytest.mark.skipif("hidden_seeds" not in inspect.signature(api.verify).parameters,
                    reason="the simulator backend needs toolchain.api's hidden_seeds (migration pending)")
def test_a_real_verify_through_the_cluster_gives_the_local_verdict(executor: cluster.RayExecutor,
                                                                  tmp_path: Path) -> None:
    remote = cluster.RayExecutor("local", SimulatorBackend(), pin_cores=True)  # the same cluster
    assert not remote.owned and remote.spec == "simulator"
    good = (ADD / "kernel_new.py").read_text()
    bad = good.replace("op=nl.add", "op=nl.subtract")
    assert bad != good
    try:
        for text in (good, bad):
            local_job = job(tmp_path, text, task=(ADD / "task.py").read_text(), name="kernel_new.py", seeds=2)
            t0 = time.monotonic()
            here = SimulatorBackend().run(local_job, Slot(0), threading.Event(), lambda m: None)
            TIMES["verify locally"] = time.monotonic() - t0
            t0 = time.monotonic()
            there = run(remote, local_job)
            TIMES["verify on the cluster"] = time.monotonic() - t0
            assert there.op == here.op == "verify" and there.sandbox == here.sandbox  # jailed on the node too
            assert (there.compiled, there.correct, there.stage) == (here.compiled, here.correct, here.stage)
            assert [p.code for p in there.problems] == [p.code for p in here.problems]
            assert [s.correct for s in there.seeds] == [s.correct for s in here.seeds]
            assert there.correct is (text == good)
    finally:
        remote.close()
    assert ray.is_initialized()  # closing a borrowed cluster leaves it running


PINNING = """import os, sys
print("SEEN", os.environ.get("NEURON_RT_VISIBLE_CORES"), sorted(n for n in os.listdir("/dev") if n.startswith("neuron")),
      file=sys.stderr)
"""


@pytest.mark.skipif(not jail.status().available, reason="the neuron backend runs only in the jail")
def test_the_neuron_backend_on_the_cluster_runs_on_the_core_ray_gave_it(executor: cluster.RayExecutor,
                                                                        tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake Neuron SDK and device of the neuron backend's tests, on the node (``runtime_env``)."""
    devices = fake_device(tmp_path, monkeypatch, devices=1)  # one device, two cores: /dev/neuron0
    monkeypatch.setenv("NKI_AGENT_NEURON_LS", str(FAKE / "bin" / "neuron-ls"))
    env = {k: os.environ[k] for k in (jail.TEST_DEVICE_DIR, SDK_PATH_VAR, "NKI_AGENT_NEURON_LS")}
    assert env[jail.TEST_DEVICE_DIR] == str(devices)
    remote = cluster.RayExecutor("local", NeuronBackend(), runtime_env={"env_vars": env})
    assert remote.pin and remote.spec == "neuron" and remote.task_env == {"env_vars": env}
    text = PINNING + example_kernel("kernel_new.py")
    try:
        for kernel_text, correct in ((text, True), (text.replace("op=nl.add", "op=nl.subtract"), False)):
            events: list[str] = []
            prepared_job = job(tmp_path, kernel_text, task=small_add_task(), seeds=2)
            there = run(remote, prepared_job, events=events)
            core = next(int(e.rsplit(" ", 1)[1]) for e in events if "NeuronCore" in e and e.startswith("running"))
            here = NeuronBackend().run(prepared_job, Slot(0, core, ("/dev/neuron0",)), threading.Event(),
                                       lambda m: None)
            assert isinstance(there, VerifyResult) and isinstance(here, VerifyResult)
            assert there.backend == here.backend == "neuron" and there.sandbox == here.sandbox == "bwrap"
            assert (there.correct, there.stage) == (here.correct, here.stage) and there.correct is correct
            assert f"SEEN {core} ['neuron0']" in there.stderr, there.stderr
            assert f"fake-nrt: NeuronCore {core} on /dev/neuron0" in there.stderr
    finally:
        remote.close()


def test_the_service_with_cluster_local_answers_a_job(executor: cluster.RayExecutor, tmp_path: Path) -> None:
    config = RunnerConfig(cluster="local", state_dir=str(tmp_path / "state"), workers=2, cache=False,
                          unsafe_no_sandbox=not jail.status().available)  # the probe runs no user code
    runner = build(config, backend=ProbeBackend())
    ex = runner.manager.executor
    assert isinstance(ex, cluster.RayExecutor) and not ex.owned and not ex.pin  # the simulator: a CPU a job
    try:
        with TestClient(runner.app) as client:
            barrier = tmp_path / "barrier"
            barrier.mkdir()
            body = {"op": "verify", "kernel": {"name": "kernel.py",
                                               "text": kernel(do="env", barrier=str(barrier), n=1)}}
            t0 = time.monotonic()
            resp = client.post("/v1/jobs?wait=60", json=body)
            TIMES["service job"] = time.monotonic() - t0
            assert resp.status_code in (200, 202), resp.text
            status = resp.json()
            assert status["state"] == "done", status
            got = json.loads(status["result"]["stderr"])
            assert got["written"] and got["core_id"] is None
            assert client.get("/v1/capabilities").json()["cluster"] == "local"
            messages = [e["message"] for e in client.get(f"/v1/jobs/{status['id']}").json()["events"]]
            assert any(m.startswith("queued on the cluster") for m in messages), messages
            assert any(m.startswith("running on node 127.0.0.1") for m in messages), messages
    finally:
        runner.close()
        ex.close()


def test_a_cluster_without_neuron_cores_is_refused_at_start(executor: cluster.RayExecutor,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    plain = cluster.RayExecutor("local", ProbeBackend())  # the same cluster, a CPU a job
    try:
        assert not plain.pin and plain.capacity == 2
        assert plain.slots(3) == [Slot(0), Slot(1), Slot(2)]  # plain: the core is chosen on the node
    finally:
        plain.close()
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    with pytest.raises(cluster.ConfigError, match="declares no neuron_cores"):
        cluster.RayExecutor("auto", ProbeBackend(), pin_cores=True)
    monkeypatch.undo()
    assert ray.is_initialized() and executor.capacity == 2  # a borrowed cluster is left running
