"""The profile's timing job on a NeuronCore: one checked launch of the kernel, then its timing; statistics here.

After the verification (``judge.verify``, with its hidden seed), ``time_on_device`` starts two jails
as a verification does: the reference role draws seed 0 (task code only) and the device kernel role
(``toolchain/judging/device_role.py``, ``mode: "time"``; only the slot's device and core) receives its
arguments, launches the kernel once — its outputs are compared here with the reference's, and a
timed kernel whose launch is wrong gets no latency — then times that launch and sends the raw
figures. ``runner/latency.py`` turns them into the ``Latency``; nothing the kernel's process
computed is used but the figures themselves, and a reply that reports a sandbox violation (the
kernel rebound the SDK) gets no latency at all.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nki_agent.toolchain.isolation import sandbox
from nki_agent.toolchain.facts.errors import Problem, SourceLocation
from nki_agent.toolchain.protocol.jobs import Latency, ProblemInfo
from ..latency import BadSamples, LoopPolicy, summarize, summarize_percentiles
from . import PreparedJob, Slot

REPLY_SLACK = 1 << 20


@dataclass
class TimedRun:
    latency: Latency
    problems: list[ProblemInfo] = field(default_factory=list)
    stderr: str = ""
    sandbox: str = ""


def _problem(code: str, message: str, path: str, severity: str = "error") -> ProblemInfo:
    return ProblemInfo.of(Problem(code, message[:4000], severity, SourceLocation(path, 1)))


def time_on_device(job: PreparedJob, slot: Slot, cancel: threading.Event, policy: LoopPolicy,
                   kernel_extra: Mapping[str, Any], env: Mapping[str, str], target: str | None) -> TimedRun:
    """Check and time one launch of the kernel on ``slot``'s NeuronCore (seed 0's inputs)."""
    r = job.request
    kernel, task = job.kernel_path, job.task_path
    none = Latency(kind="not measured", core_id=slot.core_id, target=target)
    hidden = () if os.path.realpath(kernel) == os.path.realpath(task) else (os.path.abspath(task),)
    timeout = r.timeout_s + r.time_budget_s
    ref = sandbox.start(sandbox.Job({"op": "reference", "task": task, "seeds": 1, "seed_list": [0]}),
                        timeout=timeout, cancel=cancel)
    ker_req = dict(kernel_extra, op="kernel", mode="time", kernel=kernel, task=task, target=r.target,
                   kernel_name=r.kernel_name, policy=policy.as_json())
    try:
        ker = sandbox.start(sandbox.Job(ker_req, hidden=hidden, devices=slot.devices, env=dict(env),
                                        max_result_bytes=64 << 20), timeout=timeout, cancel=cancel)
    except BaseException:
        ref.kill()
        ref.result()
        raise
    try:
        ref.close_input()
        settings, seed = _relay(ref, ker)
        ref_reply = ref.result()
        frames = list(ker.stream())
        reply = ker.result()
    except BaseException:
        for w in (ref, ker):
            w.kill()
            w.result()
        raise
    out = TimedRun(none, stderr=reply.stderr, sandbox=reply.sandbox)
    if settings is None or seed is None:
        body = ref_reply.body
        msg = body.get("problem", {}).get("message") if isinstance(body.get("problem"), dict) else None
        out.problems.append(_problem("sim_worker_crash", f"the timing job's reference did not draw seed 0: "
                                     f"{msg or body.get('problems') or 'incomplete stream'}", task))
        return out
    claimed = reply.body.get("result") if isinstance(reply.body.get("result"), dict) else {}
    for p in (claimed.get("problems") or [])[:50]:
        try:
            out.problems.append(ProblemInfo.model_validate(p))
        except ValueError:
            out.problems.append(_problem("sim_worker_crash", "a problem of the timing job does not match the protocol",
                                         kernel))
    if reply.failed:
        out.problems += [ProblemInfo.model_validate(reply.body["problem"])] if "problem" in reply.body else []
        return out
    if any(p.code == "sim_sandbox_violation" for p in out.problems):
        return out  # the kernel changed the SDK it was timed with: no figure of it is believed
    run = next(((h, a) for h, a in frames if h.get("kind") == "run" and h.get("seed") == 0), None)
    timing = next((h for h, _ in frames if h.get("kind") == "timing"), None)
    if run is None or not _correct(settings, run, seed["expected"]):
        out.problems.append(_problem("runner_timing_run_incorrect", "the timed launch's outputs differ from the "
                                     "reference (or it did not run): no latency is reported", kernel))
        return out
    if not isinstance(timing, dict):
        out.problems.append(_problem("sim_worker_crash", "the timing job sent no timing frame", kernel))
        return out
    if not timing.get("measured"):
        reason = str(timing.get("reason") or "not measured")
        out.problems.append(_problem("runner_not_measured", reason, kernel, "info"))
        return out
    try:
        out.latency = _latency(timing, policy, slot.core_id, target)
    except BadSamples as e:
        out.problems.append(_problem("sim_worker_crash", f"the timing job's figures are not measurements: {e}", kernel))
    return out


def _latency(timing: Mapping[str, Any], policy: LoopPolicy, core_id: int | None, target: str | None) -> Latency:
    source = timing.get("source")
    if source == "nki.benchmark":
        return summarize_percentiles(timing.get("windows"), warmup=policy.warmup, source=source, core_id=core_id,
                                     target=target, limit=policy.max_iterations)
    if source == "BaremetalExecutor":
        return summarize(timing.get("samples_us"), warmup=policy.warmup, source=source, window=policy.window_size(),
                         core_id=core_id, target=target, limit=policy.max_iterations)
    raise BadSamples(f"unknown timing source {source!r}")


def _relay(ref: sandbox.Worker, ker: sandbox.Worker) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Pass the reference's settings and seed 0's arguments on; keep the expected outputs here."""
    settings: dict[str, Any] | None = None
    seed: dict[str, Any] | None = None
    try:
        for header, arrays in ref.stream():
            kind = header.get("kind")
            if kind == "settings" and settings is None and isinstance(header.get("settings"), dict):
                settings = header["settings"]
                ker.send({"kind": "settings", "settings": settings})
            elif kind == "seed" and settings is not None and seed is None:
                n_in, n_par, n_exp = int(header["inputs"]), int(header["params"]), int(header["expected"])
                if min(n_in, n_par, n_exp) < 0 or len(arrays) != n_in + n_par + n_exp or any(a is None for a in arrays):
                    raise ValueError("the reference's seed frame does not match its header")
                seed = {"expected": list(arrays[n_in + n_par:])}
                sent = list(arrays[:n_in + n_par])
                ker.result_pipe.limit = max(64 << 20, 4 * sum(a.nbytes for a in arrays if a is not None) + REPLY_SLACK)
                ker.send({"kind": "seed", "seed": 0, "inputs": n_in, "params": n_par, "reference_seconds": 0.0}, sent)
            else:
                break
    except (KeyError, TypeError, ValueError):
        settings = seed = None
    ker.send({"kind": "end"})
    ker.close_input()
    return settings, seed


def _correct(settings: dict[str, Any], run: tuple[dict[str, Any], list[np.ndarray | None]],
             expected: list[np.ndarray]) -> bool:
    from nki_agent.toolchain.judging.roles import _task_settings
    from nki_agent.toolchain.judging.verify import _compare_all

    header, arrays = run
    try:
        n_out = int(header["outputs"])
    except (KeyError, TypeError, ValueError):
        return False
    got = list(arrays[:n_out])
    if any(g is None for g in got):
        return False
    return bool(_compare_all(_task_settings(settings), got, expected, 0).correct)
