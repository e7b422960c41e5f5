"""A test-only backend for the Ray executor's tests: its job's kernel text says what it does on the node.

It must be importable by Ray's worker processes: ``test_cluster.py`` starts the cluster with this
folder on the workers' ``PYTHONPATH`` (``runtime_env``), and the executor names it
``cluster_probe:ProbeBackend`` (``cluster.backend_spec``).

Commands (the kernel file's first line, ``# probe {json}``):

- ``{"do": "env", "barrier": DIR, "n": N}``: wait until N jobs have reached the barrier folder (so
  they provably run at once), then answer with the environment it ran in (JSON in ``stderr``);
- ``{"do": "block"}``: report progress, then block until the worker is killed (a long kernel);
- ``{"do": "exit"}``: kill its own worker process (``os._exit(1)``);
- ``{"do": "raise"}``: raise (a bug of the backend).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from nki_agent.runner.backends import BackendInfo, PreparedJob, Progress, Slot
from nki_agent.toolchain.protocol.jobs import JobResult, VerifyResult

PREFIX = "# probe "


def kernel(**command: Any) -> str:
    return PREFIX + json.dumps(command) + "\ndef nki_kernel(a):\n    return a\n"


class ProbeBackend:
    name = "simulator"

    def info(self) -> BackendInfo:
        return BackendInfo(name=self.name, sdk_version="probe-1", sandbox="bwrap")

    def slots(self, workers: int) -> list[Slot]:
        return [Slot(i) for i in range(workers)]

    def run(self, job: PreparedJob, slot: Slot, cancel: threading.Event, progress: Progress) -> JobResult:
        command = json.loads(job.request.kernel.text.splitlines()[0].removeprefix(PREFIX))
        do = command["do"]
        if do == "exit":
            os._exit(1)
        if do == "raise":
            raise RuntimeError("the probe's deliberate bug")
        if do == "block":
            progress("probe: blocking")
            while not cancel.wait(3600):  # nothing sets it on the node: the executor kills the worker
                pass
        if do == "env":
            barrier = command["barrier"]
            open(os.path.join(barrier, f"{os.getpid()}-{job.id}"), "w").close()
            deadline = time.monotonic() + 60
            while len(os.listdir(barrier)) < command["n"] and time.monotonic() < deadline:
                time.sleep(0.02)
        with open(job.kernel_path, encoding="utf-8") as fh:
            written = fh.read() == job.request.kernel.text
        facts = {"cores": os.environ.get("NEURON_RT_VISIBLE_CORES"), "core_id": slot.core_id,
                 "devices": list(slot.devices), "index": slot.index, "pid": os.getpid(), "folder": job.folder,
                 "written": written, "together": len(os.listdir(command["barrier"])) if do == "env" else 0}
        return VerifyResult(kernel=job.kernel_path, compiled=True, correct=True, stage="correct",
                            stderr=json.dumps(facts))
