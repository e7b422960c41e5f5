"""The ``baseline`` op of both backends: the task's reference timed in its own jail, labelled where it ran.

``run_baseline`` starts the baseline role (``toolchain/judging/baseline_role.py``: task code only) with the
job's loop policy — on the neuron backend with the slot's device and ``NEURON_RT_VISIBLE_CORES``, so
torch-neuronx runs it on that NeuronCore; elsewhere, or without torch-neuronx, it runs on the CPU and
says so (``label``, and an info problem with the reason). The role sends raw per-iteration
microseconds; the statistics are computed here (``runner/latency.py``).

``sdk_paths()`` is the runner's ``NKI_AGENT_SDK_PATH`` setting: folders holding a Neuron SDK (or, in
tests, the fake one) outside the Python installation; they are bound read-only into the jail and put
first on the roles' import path.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from nki_agent.toolchain.isolation import sandbox
from nki_agent.toolchain.facts.errors import Problem, SourceLocation
from nki_agent.toolchain.protocol.jobs import BaselineResult, Latency, ProblemInfo
from ..latency import BadSamples, LoopPolicy, summarize
from . import PreparedJob, Slot

SDK_PATH_VAR = "NKI_AGENT_SDK_PATH"
DEVICE_LABEL = "torch-neuronx"


def sdk_paths() -> tuple[str, ...]:
    """The existing absolute folders of ``NKI_AGENT_SDK_PATH`` (``os.pathsep``-separated)."""
    raw = os.environ.get(SDK_PATH_VAR, "")
    return tuple(os.path.abspath(p) for p in raw.split(os.pathsep) if p and os.path.isdir(p))


def policy_of(job: PreparedJob) -> LoopPolicy:
    r = job.request
    return LoopPolicy(warmup=r.warmup, max_iterations=r.iterations, time_budget_s=r.time_budget_s)


def slot_env(slot: Slot) -> dict[str, str]:
    """The variables that pin a job to its slot's NeuronCore (none for a plain slot)."""
    return {"NEURON_RT_VISIBLE_CORES": str(slot.core_id)} if slot.core_id is not None else {}


def run_baseline(job: PreparedJob, slot: Slot, cancel: threading.Event) -> BaselineResult:
    """Time the task's reference (warmup, then windows until 1 % spread or the job's limits)."""
    r = job.request
    policy = policy_of(job)
    backend = "neuron" if slot.core_id is not None else "simulator"
    out = BaselineResult(kernel=job.kernel_path, task=job.task_path, target=r.target or "", backend=backend)
    t0 = time.monotonic()
    req: dict[str, Any] = {"op": "baseline", "task": job.task_path, "policy": policy.as_json(), "seed": 0,
                           "sdk_path": list(sdk_paths())}
    try:
        sjob = sandbox.Job(req, devices=slot.devices, env=slot_env(slot))
    except ValueError as e:  # a slot the jail refuses (a misconfigured backend)
        out.problems.append(_problem("sim_bad_input", str(e), job.task_path))
        return out
    reply = sandbox.run_job(sjob, timeout=r.timeout_s, cancel=cancel)
    out.sandbox, out.stderr, out.seconds = reply.sandbox, reply.stderr, round(time.monotonic() - t0, 3)
    body = reply.body
    problems = [body["problem"]] if "problem" in body else body.get("problems")
    if not isinstance(problems, list):
        problems = [_problem("sim_worker_crash", str(body.get("error", "the baseline worker failed")),
                             job.task_path).model_dump()]
    if problems:
        out.problems = [_problem_of(p, job.task_path) for p in problems[:50]]
        return out
    label = body.get("label")
    out.label = label if label in (DEVICE_LABEL, "cpu") else "cpu"
    try:
        out.latency = summarize(body.get("samples_us"), warmup=policy.warmup, source=out.label,
                                window=policy.window_size(), limit=policy.max_iterations,
                                core_id=slot.core_id if out.label == DEVICE_LABEL else None, target=r.target)
    except BadSamples as e:
        out.latency = Latency(kind="not measured", source=out.label)
        out.problems.append(_problem("sim_worker_crash", f"the baseline worker's figures are not measurements: {e}",
                                     job.task_path))
    reason = body.get("reason")
    if isinstance(reason, str) and reason:
        out.problems.append(_problem("runner_baseline_cpu", reason[:500], job.task_path, "info"))
    return out


def _problem(code: str, message: str, path: str, severity: str = "error") -> ProblemInfo:
    return ProblemInfo.of(Problem(code, message, severity, SourceLocation(path, 1)))


def _problem_of(raw: Any, path: str) -> ProblemInfo:
    try:
        return ProblemInfo.model_validate(raw)
    except ValueError:
        return _problem("sim_worker_crash", "the baseline worker's problem does not match the protocol", path)
