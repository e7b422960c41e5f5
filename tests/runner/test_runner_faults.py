"""Faults of a real runner (``nki-agent runner serve`` subprocess, simulator backend, jailed workers).

- A jailed worker SIGKILLed mid-job (found through /proc: the runner's descendant running
  ``nki_agent.toolchain.isolation.worker`` that is burning CPU, i.e. the spinning kernel) → that job ends with a
  clear ``sim_worker_crash`` problem, and the next job on the same (only) slot verifies correctly.
- The runner SIGKILLed while one job runs and two are queued (``--workers 1``), then started again on
  the same ``--state-dir`` → the running job reports failed ("restarted"), the queued ones complete.
- A client whose event stream drops mid-job fetches the job's result later, by id, on a new connection.

Everything waits on events — "listening on" lines of the runner's stdout, the job's event stream, a
process appearing in /proc — with bounded timeouts only as safety nets; nothing asserts on timing.
Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from nki_agent.toolchain.isolation import jail

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "faults-token-" + os.urandom(8).hex()
BOUND = 300.0  # safety net (seconds) for any one wait; every wait here normally ends in seconds
ADD_KERNEL = (ROOT / "examples" / "l1_add" / "kernel_new.py").read_text()
TASK = (ROOT / "examples" / "l1_add" / "task.py").read_text().replace("2112, 1024", "200, 64")
assert "200, 64" in TASK
SPIN_CALL = "    n_rows, n_cols = a.shape\n"
assert SPIN_CALL in ADD_KERNEL
# the add kernel, spinning first (bounded: 240 s) — a job that is surely still running when the test acts
SPINNER = ("import time\n" + ADD_KERNEL.replace(
    SPIN_CALL, "    deadline = time.monotonic() + 240\n    while time.monotonic() < deadline:\n        pass\n"
    + SPIN_CALL))
# the add kernel holding for a moment first: the job is still running when its client's stream drops
HOLDER = "import time\n" + ADD_KERNEL.replace(SPIN_CALL, "    time.sleep(2)\n" + SPIN_CALL)
WORKER = "nki_agent.toolchain.isolation.worker"
TICKS = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------------ a runner process
class Served:
    """``nki-agent runner serve --port 0 --state-dir STATE`` (token in its environment) in its own session;
    ready when its "listening on" line arrives."""

    def __init__(self, state: Path, log: Path, args: list[str]) -> None:
        self.state, self.log, self.args = state, log, args
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> Served:
        argv = [sys.executable, "-m", "nki_agent", "runner", "serve", "--host", "127.0.0.1", "--port", "0",
                "--state-dir", str(self.state), *self.args]
        if not jail.status().available:
            argv.append("--unsafe-no-sandbox")  # where namespaces do not work, as local tools fall back
        env = dict(os.environ, NKI_AGENT_RUNNER_TOKEN=TOKEN, PYTHONUNBUFFERED="1")
        with open(self.log, "ab") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                         env=env, cwd=str(ROOT), start_new_session=True)
        lines: queue.Queue[str | None] = queue.Queue()

        def read(out: Any) -> None:
            for raw in out:
                lines.put(raw.decode("utf-8", "replace"))
            lines.put(None)

        threading.Thread(target=read, args=(self.proc.stdout,), daemon=True).start()
        while True:
            try:
                line = lines.get(timeout=BOUND)
            except queue.Empty:
                line = None
            if line is None:
                self.kill()
                pytest.fail(f"the runner did not start listening:\n{self.log.read_text(errors='replace')[-3000:]}")
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            if found:
                self.url = found.group(1)
                return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, trust_env=False,
                            timeout=httpx.Timeout(120.0, connect=10.0))

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(60)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """Start runners (``serve(state_dir, *args)``); every one started is stopped at teardown."""
    started: list[Served] = []

    def start(state: Path | None = None, *args: str) -> Served:
        s = Served(state or tmp_path / "state", tmp_path / f"runner-{len(started)}.stderr",
                   ["--workers", "1", *args])
        started.append(s)
        return s.start()

    yield start
    for s in started:
        s.stop()


# ------------------------------------------------------------------------------------------- jobs
def job(kernel: str, nonce: str) -> dict[str, Any]:
    return {"op": "verify", "kernel": {"name": "kernel.py", "text": kernel + f"\n# {nonce}\n"},
            "task": {"name": "task.py", "text": TASK}, "seeds": 1, "timeout_s": 300, "nonce": nonce}


def submit(client: httpx.Client, body: dict[str, Any]) -> str:
    r = client.post("/v1/jobs", json=body)
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


def events(client: httpx.Client, job_id: str, until: Callable[[str, dict[str, Any]], bool]) -> dict[str, Any]:
    """Follow the job's event stream up to the first event ``until(kind, data)`` accepts (or the final status)."""
    deadline = time.monotonic() + BOUND
    kind = ""
    with client.stream("GET", f"/v1/jobs/{job_id}/events") as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                if until(kind, data) or kind == "status":
                    return data  # type: ignore[no-any-return]
            assert time.monotonic() < deadline, f"job {job_id} did not get there within {BOUND:.0f} s"
    raise AssertionError(f"the event stream of {job_id} ended without a final status")


def backend_started(kind: str, data: dict[str, Any]) -> bool:
    """The backend's own first progress event: the job's workers are starting."""
    return kind == "progress" and data["state"] == "running" and not data["message"].startswith("running on slot")


def final(client: httpx.Client, job_id: str) -> dict[str, Any]:
    return events(client, job_id, lambda kind, data: False)


# ------------------------------------------------------------------------------------------ processes
def _stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, CPU ticks used) of a process, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(rest[1]), rest[0], int(rest[11]) + int(rest[12])


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def descendants(root: int) -> list[int]:
    parents = {}
    for d in os.listdir("/proc"):
        if d.isdigit() and (st := _stat(int(d))) is not None:
            parents[int(d)] = st[0]
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        out += kids
        todo += kids
    return out


def jailed_workers(runner: int) -> list[int]:
    """The worker Python processes below ``runner`` (inside their jails: not the bwrap processes around them)."""
    out = []
    for pid in descendants(runner):
        argv = _cmdline(pid)
        if argv and WORKER in argv and os.path.basename(argv[0]) != "bwrap":
            out.append(pid)
    return out


def spinning_worker(runner: int) -> int:
    """The kernel worker of the spinning job: the runner's worker process that has used a second of CPU
    (neither the reference worker nor a starting worker does). Polls /proc until it shows up."""
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        for pid in jailed_workers(runner):
            st = _stat(pid)
            if st is not None and st[1] not in ("Z", "X") and st[2] >= TICKS:
                return pid
        time.sleep(0.05)  # the poll interval of /proc, not a guess at how long anything takes
    raise AssertionError("no worker of the spinning job showed up under the runner")


def gone(pids: list[int]) -> bool:
    return all((st := _stat(p)) is None or st[1] in ("Z", "X") for p in pids)


# ---------------------------------------------------------------------------------------------- tests
def test_a_worker_killed_mid_job_fails_that_job_clearly_and_the_slot_is_reused(serve: Callable[..., Served]) -> None:
    runner = serve()
    with runner.client() as c:
        victim = submit(c, job(SPINNER, "spin"))
        events(c, victim, backend_started)
        worker = spinning_worker(runner.pid)
        os.kill(worker, signal.SIGKILL)
        status = final(c, victim)
        problems = (status.get("result") or {}).get("problems") or []
        codes = [p["code"] for p in problems]
        assert (status["state"] == "done" and "sim_worker_crash" in codes) or \
            (status["state"] == "failed" and status["error"]), json.dumps(status)[:3000]
        assert not (status.get("result") or {}).get("correct")
        crash = next((p for p in problems if p["code"] == "sim_worker_crash"), None)
        assert crash is None or "exited" in crash["message"] or "killed" in crash["message"], crash
        assert runner.proc is not None and runner.proc.poll() is None  # the runner itself is fine
        after = submit(c, job(ADD_KERNEL, "after"))
        status = final(c, after)
        assert status["state"] == "done" and status["result"]["correct"], json.dumps(status)[:3000]
        assert status["nonce"] == "after"
        slots = [e["message"] for e in c.get(f"/v1/jobs/{victim}").json()["events"] + status["events"]
                 if e["message"].startswith("running on slot")]
        assert all(m.startswith("running on slot 0") for m in slots), slots


def test_a_runner_killed_mid_job_loses_no_accepted_job(serve: Callable[..., Served], tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = serve(state)
    with first.client() as c:
        running = submit(c, job(SPINNER, "running"))
        events(c, running, backend_started)
        workers = [spinning_worker(first.pid)]
        queued = [submit(c, job(ADD_KERNEL, f"queued-{n}")) for n in range(2)]
        for q in queued:
            assert c.get(f"/v1/jobs/{q}").json()["state"] == "queued"
    first.kill()
    deadline = time.monotonic() + BOUND
    while not gone(workers):  # the jails die with their runner (bwrap --die-with-parent)
        assert time.monotonic() < deadline, f"jailed workers {workers} outlived their runner"
        time.sleep(0.05)  # the poll interval of /proc
    second = serve(state)
    with second.client() as c:
        lost = c.get(f"/v1/jobs/{running}").json()
        assert lost["state"] == "failed" and "restarted" in lost["error"], lost
        for n, q in enumerate(queued):
            status = final(c, q)
            assert status["state"] == "done" and status["result"]["correct"], json.dumps(status)[:3000]
            assert status["nonce"] == f"queued-{n}"


def test_a_client_whose_stream_drops_fetches_the_result_later_by_id(serve: Callable[..., Served]) -> None:
    runner = serve()
    with runner.client() as c:
        job_id = submit(c, job(HOLDER, "dropped"))
        events(c, job_id, backend_started)
    # the first connection is closed mid-job (its stream and the client with it); a new client asks by id
    with runner.client() as later:
        status = final(later, job_id)
        fetched = later.get(f"/v1/jobs/{job_id}")
    assert fetched.status_code == 200
    got = fetched.json()
    assert got["state"] == "done" and got["result"]["correct"], json.dumps(got)[:3000]
    assert got["nonce"] == "dropped" and got["result"] == status["result"]
