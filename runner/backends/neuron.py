"""The ``neuron`` backend: the real Neuron SDK on a Trainium host, one job per NeuronCore, every step jailed.

``info()`` reads the SDK's and NKI's versions from the installed packages' metadata (the venv, plus
the folders of ``NKI_AGENT_SDK_PATH``), which API generations are importable, the target, and the
NeuronCore count: ``neuron-ls --json-output`` (the sum of its devices' ``nc_count``) when it exists,
else the ``/dev/neuron*`` count × cores per device. ``slots(workers)`` gives one slot per NeuronCore:
``Slot(i, core_id=i, devices=("/dev/neuron<i // cores_per_device>",))``.

``run`` — every piece of user code runs in the OS jail with only its slot's device and
``NEURON_RT_VISIBLE_CORES=<core_id>``:

- ``verify``: ``judge.verify`` with the device kernel role (``kernel_extra={"role": "device"}``,
  ``toolchain/judging/device_role.py``) and one hidden seed; the verdict is computed in this process from the
  reference worker's arrays.
- ``compile``: a launch on seed 0's inputs (the SDK compiles on the device), as ``results.compile_result``.
- ``profile``: the verification, then — if correct — the timing job (``timing.py``: one checked
  launch, then timing, statistics computed here) and the baseline (``baseline.py``); a measured
  speedup over 10× adds the flag ``speedup_over_10x``.
- ``baseline``: ``run_baseline`` on the slot's core. ``simulate``: the embedded simulator
  (``toolchain.runner.LocalRunner.simulate``), labelled ``backend="simulator"`` — it is what ran it.

A missing SDK, a slot without a NeuronCore or a judge without device support is a clear problem of
the job's result, never an exception.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.metadata
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nki_agent.toolchain.isolation import jail
from nki_agent.toolchain.judging.device_sdk import CLASSIC, NEW, generation_of
from nki_agent.toolchain.facts.errors import Problem, SourceLocation
from nki_agent.toolchain.protocol.jobs import (
    CompileResult,
    JobResult,
    Latency,
    ProblemInfo,
    ProfileResult,
    SimulateResult,
    VerifyResult,
)
from ..latency import speedup
from . import BackendInfo, PreparedJob, Progress, Slot
from .baseline import policy_of, run_baseline, sdk_paths, slot_env

HIDDEN_SEEDS = 1
SPEEDUP_FLAG_OVER = 10.0
NEURON_LS = "/opt/aws/neuron/bin/neuron-ls"
NEURON_LS_TIMEOUT = 10.0
CORES_PER_DEVICE = {"trn1": 2, "trn2": 8, "trn3": 8}  # physical NeuronCores per device
DIST = {"sdk": "neuronx-cc", "nki": "nki", "nkipy": "nkipy", "torch_neuronx": "torch-neuronx"}


@dataclass(frozen=True)
class Topology:
    cores: int
    cores_per_device: int
    source: str  # neuron-ls | /dev | none
    target: str


class NeuronBackend:
    """See the module docstring. Constructor arguments override the host's settings (tests)."""

    name = "neuron"

    def __init__(self, sdk_path: Sequence[str] | None = None, neuron_ls: str | None = None,
                 target: str | None = None, cores_per_device: int | None = None) -> None:
        self.sdk_path = tuple(sdk_path) if sdk_path is not None else sdk_paths()
        found = neuron_ls or os.environ.get("NKI_AGENT_NEURON_LS") or shutil.which("neuron-ls") or NEURON_LS
        self.neuron_ls = found if os.path.isfile(found) and os.access(found, os.X_OK) else ""
        self._target = target or os.environ.get("NKI_AGENT_NEURON_TARGET") or None
        self._per_device = cores_per_device

    # ---------------------------------------------------------------- what this host has

    def _paths(self) -> list[str]:
        return [*self.sdk_path, *sys.path]

    def _version(self, dist: str) -> str | None:
        want = dist.lower().replace("_", "-")
        for d in importlib.metadata.distributions(path=self._paths()):
            name = str(d.metadata["Name"] or "").lower().replace("_", "-")
            if name == want:
                return str(d.version)
        return None

    def generations(self) -> tuple[str, ...]:
        """The API generations whose SDK packages are importable (found, not imported)."""
        out = []
        spec = importlib.machinery.PathFinder.find_spec("neuronxcc", self._paths())
        if spec is not None and any(os.path.exists(os.path.join(d, "nki")) for d in spec.submodule_search_locations or ()):
            out.append(CLASSIC)
        if importlib.machinery.PathFinder.find_spec("nki", self._paths()) is not None:
            out.append(NEW)
        return tuple(out)

    @functools.cached_property
    def topology(self) -> Topology:
        devices = _neuron_ls(self.neuron_ls) if self.neuron_ls else None
        if devices:
            per = self._per_device or int(devices[0].get("nc_count") or 0)
            target = self._target or _target_of(devices, per)
            return Topology(sum(int(d.get("nc_count") or 0) for d in devices), per, "neuron-ls", target)
        folder = jail.device_dir()
        try:
            n = len([f for f in os.listdir(folder) if re.fullmatch(r"neuron[0-9]+", f)])
        except OSError:
            n = 0
        target = self._target or "trn1"
        per = self._per_device or CORES_PER_DEVICE.get(target, 2)
        return Topology(n * per, per, "/dev" if n else "none", target)

    def info(self) -> BackendInfo:
        topo = self.topology
        gens = self.generations()
        extra = {"cores_source": topo.source, "cores_per_device": str(topo.cores_per_device),
                 "sdk_path": os.pathsep.join(self.sdk_path)}
        for key in ("nkipy", "torch_neuronx"):
            extra[key] = self._version(DIST[key]) or ""
        sdk = self._version(DIST["sdk"])
        return BackendInfo(name=self.name, sdk_version=f"neuronx-cc {sdk}" if sdk else None,
                           nki_version=self._version(DIST["nki"]), generations=gens, targets=(topo.target,),
                           neuron_cores=topo.cores, latency="measured" if topo.cores and gens else "not measured",
                           sandbox=jail.status().label, extra=extra)

    def slots(self, workers: int) -> list[Slot]:
        """One slot per NeuronCore (at most ``workers``); one device-less slot when there is none."""
        topo = self.topology
        n = min(max(1, workers), topo.cores)
        if n == 0:
            return [Slot(0)]
        return [Slot(i, core_id=i, devices=(f"/dev/neuron{i // max(1, topo.cores_per_device)}",)) for i in range(n)]

    # ---------------------------------------------------------------- running a job

    def run(self, job: PreparedJob, slot: Slot, cancel: threading.Event, progress: Progress) -> JobResult:
        r = job.request
        where = f"NeuronCore {slot.core_id} ({', '.join(slot.devices)})" if slot.core_id is not None else "no NeuronCore"
        progress(f"{r.op} on {where}")
        if r.op == "simulate":
            return self._simulate(job, cancel)
        if r.op == "baseline":
            return run_baseline(job, slot, cancel)
        failed = self._cannot_run(job, slot)
        if failed is not None:
            return _empty(r.op, job, failed, self.topology.target)
        if r.op == "compile":
            v = self._verify(job, slot, cancel, seeds=1, hidden=0)
            from nki_agent.toolchain.judging.results import compile_result

            return _neuron(compile_result(v, r.kernel_name))
        v = self._verify(job, slot, cancel, seeds=r.seeds, hidden=HIDDEN_SEEDS)
        if r.op == "verify":
            return v
        return self._profile(job, slot, cancel, progress, v)

    def _kernel_extra(self) -> dict[str, Any]:
        return {"role": "device", "sdk_path": list(self.sdk_path), "device_target": self.topology.target}

    def _cannot_run(self, job: PreparedJob, slot: Slot) -> ProblemInfo | None:
        """Why a device op cannot run at all here (no core, no SDK for the kernel's generation, old judge)."""
        path = job.kernel_path
        if slot.core_id is None or not slot.devices:
            return _problem("runner_device_unavailable", "this runner has no NeuronCore (neuron-ls and /dev/neuron* "
                            "found none): device jobs cannot run here", path)
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                gen = generation_of(f.read(5 << 20))
        except OSError as e:
            return _problem("sim_bad_input", f"the kernel file cannot be read: {e}", path)
        if gen not in self.generations():
            what = "neuronx-cc (neuronxcc.nki, the classic API)" if gen == CLASSIC else "the nki package (new API)"
            return _problem("runner_sdk_missing", f"the Neuron SDK is not installed on this runner: {what} is not "
                            "importable here, so this kernel cannot run on the device", path)
        from nki_agent.toolchain.judging import judge

        params = inspect.signature(judge.verify).parameters
        if not {"hidden_seeds", "kernel_extra", "devices", "env"} <= set(params):
            return _problem("runner_device_unavailable", "this toolchain's judge cannot run a kernel on a device yet "
                            "(judge.verify has no kernel_extra / devices / env)", path)
        return None

    def _verify(self, job: PreparedJob, slot: Slot, cancel: threading.Event, seeds: int, hidden: int) -> VerifyResult:
        from nki_agent.toolchain.judging import judge

        r = job.request
        raw = judge.verify(job.kernel_path, job.task_path, seeds, r.target, r.kernel_name, r.timeout_s, cancel,
                           hidden_seeds=hidden, kernel_extra=self._kernel_extra(), devices=slot.devices,
                           env=slot_env(slot))
        v = VerifyResult.model_validate(raw if isinstance(raw, dict) else raw.model_dump())
        return _neuron(v)

    def _profile(self, job: PreparedJob, slot: Slot, cancel: threading.Event, progress: Progress,
                 v: VerifyResult) -> ProfileResult:
        from .timing import time_on_device

        out = ProfileResult.model_validate(dict(v.model_dump(), op="profile"))
        out.latency = Latency(kind="not measured", core_id=slot.core_id, target=self.topology.target)
        if not v.correct:
            return out
        progress(f"timing on NeuronCore {slot.core_id}")
        timed = time_on_device(job, slot, cancel, policy_of(job), self._kernel_extra(), slot_env(slot),
                               self.topology.target)
        out.latency = timed.latency
        out.problems += timed.problems
        if timed.stderr:
            out.stderr = (out.stderr + "\n" + timed.stderr).strip()[-8000:]
        if out.latency.kind == "measured":
            out.stage = "latency"
            progress("timing the baseline")
            out.baseline = run_baseline(job, slot, cancel)
            out.speedup = speedup(out.latency, out.baseline.latency)
            if out.speedup is not None and out.speedup > SPEEDUP_FLAG_OVER and "speedup_over_10x" not in out.flags:
                out.flags.append("speedup_over_10x")
        return out

    def _simulate(self, job: PreparedJob, cancel: threading.Event) -> SimulateResult:
        from nki_agent.toolchain.isolation.runner import LocalRunner  # this machine's jail, never the process-wide runner

        r = job.request
        res = LocalRunner().simulate(job.kernel_path, job.task_path, target=r.target, kernel_name=r.kernel_name,
                                     seed=r.seed, timeout=r.timeout_s, cancel=cancel)
        res.backend = "simulator"
        return res


def _neuron(res: Any) -> Any:
    res.backend = "neuron"
    return res


def _problem(code: str, message: str, path: str) -> ProblemInfo:
    return ProblemInfo.of(Problem(code, message, location=SourceLocation(path, 1)))


def _empty(op: str, job: PreparedJob, problem: ProblemInfo, target: str) -> JobResult:
    common = {"kernel": job.kernel_path, "task": job.task_path, "target": job.request.target or target,
              "backend": "neuron", "problems": [problem]}
    if op == "compile":
        return CompileResult.model_validate(common)
    if op == "profile":
        return ProfileResult.model_validate(common)
    return VerifyResult.model_validate(common)


def _neuron_ls(binary: str) -> list[dict[str, Any]] | None:
    """``neuron-ls --json-output``: the list of devices, or None when it fails or says something else."""
    try:
        done = subprocess.run([binary, "--json-output"], capture_output=True, timeout=NEURON_LS_TIMEOUT, check=False)
        data = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if isinstance(data, dict):
        data = data.get("neuron_devices")
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        return None
    return data


def _target_of(devices: list[dict[str, Any]], per_device: int) -> str:
    """trn1 / trn2 / trn3 from neuron-ls' instance or device type when it says, else from cores per device."""
    text = " ".join(str(d.get(k, "")) for d in devices for k in ("instance_type", "device_type", "device_name")).lower()
    for name, marks in (("trn3", ("trn3", "trainium3")), ("trn2", ("trn2", "trainium2")), ("trn1", ("trn1", "trainium"))):
        if any(m in text for m in marks):
            return name
    return "trn2" if per_device == CORES_PER_DEVICE["trn2"] else "trn1"
