"""The ``simulator`` backend: the embedded NKI toolchain, every job in the OS jail of ``toolchain/isolation/sandbox.py``.

compile / simulate / verify / profile go through ``toolchain.runner.LocalRunner`` exactly as local tools do (the
verdict judged outside the kernel's process, plus one hidden seed the client never sees); latency
comes from the cost model (labelled "estimated", never "measured");
``baseline`` times the task's reference on CPU (``baseline.py``); ``sweep`` jobs are also judged on the
task's unseen shapes (``sweep.py``). Slots are plain worker slots.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

from nki_agent import __version__

from nki_agent.toolchain.isolation import jail
from nki_agent.toolchain.protocol.jobs import JobResult, VerifyResult
from nki_agent.toolchain.isolation.runner import LocalRunner
from ..sweep import sweep
from . import BackendInfo, PreparedJob, Progress, Slot

HIDDEN_SEEDS = 1
# this machine's jail, never the process-wide ``runner.current()``: a process that both serves jobs and
# has a remote runner installed (a test, an editor) would otherwise send the runner's jobs back to it
LOCAL = LocalRunner()


class SimulatorBackend:
    name = "simulator"

    def info(self) -> BackendInfo:
        st = jail.status()
        return BackendInfo(name=self.name, sdk_version=f"nki-agent-embedded {__version__}", nki_version=None,
                           latency="estimated", sandbox=st.label)

    def slots(self, workers: int) -> list[Slot]:
        return [Slot(i) for i in range(workers)]

    def run(self, job: PreparedJob, slot: Slot, cancel: threading.Event, progress: Progress) -> JobResult:
        r = job.request
        common: dict[str, Any] = {"target": r.target, "kernel_name": r.kernel_name, "timeout": r.timeout_s,
                                  "cancel": cancel}
        progress(f"{r.op} on the embedded simulator")
        result: JobResult
        if r.op == "compile":
            result = LOCAL.compile(job.kernel_path, job.task_path, **common)  # type: ignore[arg-type]
        elif r.op == "simulate":
            result = LOCAL.simulate(job.kernel_path, job.task_path, seed=r.seed, **common)  # type: ignore[arg-type]
        elif r.op == "verify":
            result = LOCAL.verify(job.kernel_path, job.task_path, seeds=r.seeds, hidden_seeds=HIDDEN_SEEDS,
                                **common)  # type: ignore[arg-type]
        elif r.op == "profile":
            result = LOCAL.profile(job.kernel_path, job.task_path, seeds=r.seeds, hidden_seeds=HIDDEN_SEEDS,
                                 warmup=r.warmup, iterations=r.iterations, **common)  # type: ignore[arg-type]
        else:
            from .baseline import run_baseline

            result = run_baseline(job, slot, cancel)
        if r.sweep and isinstance(result, VerifyResult):  # ProfileResult too
            check = functools.partial(LOCAL.verify, target=r.target, kernel_name=r.kernel_name, timeout=r.timeout_s,
                                      cancel=cancel)
            # the generated case modules sit next to the task: the reference role imports from the task's folder
            result = sweep(result, os.path.dirname(job.task_path), job.kernel_path, job.task_path, check, r.timeout_s,
                           cancel, LOCAL)
        result.backend = self.name
        return result
