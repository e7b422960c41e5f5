"""The kernel role on a real Neuron device: the kernel loaded with the real SDK, run and timed on its NeuronCore.

The same place in a verification as ``roles.kernel_role`` (the judge, ``judge.py``, starts it as
the kernel worker with ``kernel_extra={"role": "device", ...}``; the worker dispatches here), the
same frames: it loads only the kernel — in a jail where the task file cannot be opened, with only
its slot's ``/dev/neuronN`` and ``NEURON_RT_VISIBLE_CORES`` — waits for the settings, then for each
seed's arguments runs the kernel once on the device (``device_sdk``: ``nki.baremetal`` for classic
kernels, ``nki.jit`` for new ones) and sends a ``run`` frame with its outputs and its arguments as
they are afterwards; the parent compares them with the reference's. Before every run, the buffers
the previous run returned are poisoned (NaN for floats, 0xFF bytes otherwise), so an output the
kernel does not write never shows the previous seed's right answer where the SDK reuses host
buffers (device HBM itself cannot be cleared through the documented API: the hidden seed covers
stale device memory).

With ``mode: "time"`` (the profile's timing job) it then times the last seed's launch
(``device_sdk.time_classic`` / ``time_new``) and sends one ``timing`` frame of raw figures; the
statistics are computed by the parent (``runner/latency.py``). The kernel source is scanned by the
tamper tripwire (``tamper.py``) before it is loaded; the SDK's functions and classes are fingerprinted
around the kernel's life, and a kernel that rebinds any of them (a patched benchmark) gets no latency
and a ``sim_sandbox_violation``. The audit-hook guard of the simulator's kernel role is not installed
here: the real SDK starts its compiler as a process and loads native code — the OS jail is the
boundary. Everything this role says is untrusted, as in ``roles.py``.
"""

from __future__ import annotations

import os
import sys
import time
import types
from collections.abc import Sequence
from typing import Any

import numpy as np

from nki_agent.toolchain.facts.errors import NkiError, Problem, SourceLocation
from nki_agent.toolchain.judging.roles import MAX_OUTPUTS, Emit, Frames, _refuse_tampering, _task_settings

MAX_SOURCE_BYTES = 5 << 20
WATCHED = ("neuronxcc", "nki", "nkipy", "numpy", "nki_agent", "fake_neuron_device")  # the SDK, and what reports on it


def _watched(name: str) -> bool:
    return any(name == w or name.startswith(w + ".") for w in WATCHED)


def fingerprint() -> dict[tuple[str, str, str], int]:
    """Identity of every function and class of the SDK's modules, and of the methods of those classes."""
    out: dict[tuple[str, str, str], int] = {}
    for name, mod in list(sys.modules.items()):
        if mod is None or not _watched(name):
            continue
        try:
            items = list(vars(mod).items())
        except TypeError:
            continue
        for key, value in items:
            if not callable(value):
                continue  # data (caches, singletons) may change legitimately
            out[(name, str(key), "")] = id(value)
            if isinstance(value, type) and _watched(str(getattr(value, "__module__", ""))):
                for attr, member in list(vars(value).items()):
                    if callable(member) or isinstance(member, (property, classmethod, staticmethod)):
                        out[(name, str(key), str(attr))] = id(member)
    return out


def changed(before: dict[tuple[str, str, str], int], take: Any = None) -> list[str]:
    """What of ``before`` was rebound since; ``take`` is the fingerprint function captured before the
    kernel was loaded (a kernel that rebinds this module's ``fingerprint`` does not choose the answer)."""
    after = (take or fingerprint)()
    return [f"{m}.{n}" + (f".{a}" if a else "") for (m, n, a), ident in before.items() if after.get((m, n, a)) != ident]


def poison(arrays: Sequence[Any]) -> None:
    """Fill each writable array with NaN (floats) or 0xFF bytes (integers, booleans)."""
    for a in arrays:
        if not isinstance(a, np.ndarray) or not a.flags.writeable or a.size == 0:
            continue
        if a.dtype.kind == "f" or (a.dtype.kind == "V" and np.isnan(np.array(np.nan).astype(a.dtype))):
            a[...] = np.array(np.nan).astype(a.dtype)
        elif a.flags.c_contiguous:
            a.reshape(-1).view(np.uint8)[...] = 0xFF
        else:
            a[...] = np.frombuffer(b"\xff" * a.dtype.itemsize, a.dtype)[0]


def load_kernel_module(path: str, search_path: Sequence[str]) -> types.ModuleType:
    """Execute the kernel file as a module with the real SDK's imports (no simulator shim)."""
    from nki_agent.toolchain.location import traceback_location
    from nki_agent.toolchain.tasks import search_dirs

    with open(path, "rb") as f:
        raw = f.read(MAX_SOURCE_BYTES + 1)
    if len(raw) > MAX_SOURCE_BYTES or b"\x00" in raw:
        raise NkiError("sim_bad_input", f"{path} is not a kernel source file", SourceLocation(path, 1))
    try:
        code = compile(raw.decode("utf-8", "replace"), path, "exec")
    except SyntaxError as e:
        raise NkiError("sim_syntax_error", f"SyntaxError: {e.msg}",
                       SourceLocation(path, e.lineno or 1, e.offset or 1)) from None
    module = types.ModuleType("nki_agent_kernel")
    module.__file__ = path
    for d in reversed(search_dirs(path, search_path)):
        if d not in sys.path:
            sys.path.insert(0, d)
    sys.modules["nki_agent_kernel"] = module
    try:
        exec(code, module.__dict__)  # noqa: S102 - the kernel file, in the jail: that is the job
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        raise NkiError("sim_python_exception", f"{type(e).__name__} while importing {os.path.basename(path)}: {e}",
                       traceback_location(e.__traceback__) or SourceLocation(path, 1)) from e
    return module


def find_kernel(module: types.ModuleType, source: str, name: str | None, path: str) -> Any:
    from nki_agent.toolchain.judging.device_sdk import jit_functions

    names = [name] if name else jit_functions(source)
    if len(names) != 1:
        what = "no function decorated with @nki.jit" if not names else f"several kernels ({', '.join(names)})"
        raise NkiError("sim_no_kernel", f"{os.path.basename(path)} defines {what}; name one with KERNEL = '...' in the "
                       "task or kernel_name", SourceLocation(path, 1))
    obj = getattr(module, names[0], None)
    if not callable(obj):
        raise NkiError("sim_no_kernel", f"{os.path.basename(path)} has no kernel named '{names[0]}'",
                       SourceLocation(path, 1))
    return obj


def _device_problem(e: BaseException, path: str) -> Problem:
    """An exception the SDK or the device raised, at the kernel's line when the traceback reaches it."""
    from nki_agent.toolchain.location import traceback_location

    if isinstance(e, NkiError):
        return Problem.from_error(e)
    loc = traceback_location(e.__traceback__) or SourceLocation(path, 1)
    return Problem("runner_device_error", f"{type(e).__name__} on the Neuron device: {e}"[:4000], location=loc)


def device_role(req: dict[str, Any], next_frame: Frames, emit: Emit) -> tuple[dict[str, Any], list[Any]]:
    """Run the kernel on each seed's arguments on the device (``settings``, ``seed``... ``end`` frames);
    a ``run`` frame per seed; with ``mode: "time"`` then a ``timing`` frame of raw figures."""
    from nki_agent.toolchain.judging import device_sdk
    from nki_agent.toolchain.tasks import search_path
    from nki_agent.toolchain.judging.verify import SeedResult, VerifyResult

    kernel_path = req["kernel"]
    result = VerifyResult(kernel=kernel_path, task=req.get("task", ""), target=str(req.get("device_target") or ""))
    runs: dict[str, Any] = {}
    for folder in reversed([p for p in req.get("sdk_path") or () if isinstance(p, str) and p]):
        sys.path.insert(0, folder)
    try:
        with open(kernel_path, encoding="utf-8", errors="replace") as f:
            source = f.read(MAX_SOURCE_BYTES)
        _refuse_tampering(kernel_path)
        result.generation = device_sdk.generation_of(source)
        sdk = device_sdk.load(result.generation)
        take, compare = fingerprint, changed  # bound before any kernel code runs
        before = take()
        module = load_kernel_module(kernel_path, search_path(req))
        header, _ = next_frame()
        settings = _task_settings(header.get("settings") or {})
        result.target = result.target or settings.target or ""
        kernel = find_kernel(module, source, req.get("kernel_name") or settings.kernel_name, kernel_path)
        run = device_sdk.launcher(sdk, kernel, settings.grid, settings.lnc)
        n_params = device_sdk.parameter_count(kernel)
        last: list[Any] = []
        timed: tuple[list[Any], list[Any]] | None = None
        neff: str | None = None
        scratch = os.path.join(req.get("scratch_dir") or "/tmp", "nki-agent-neff")
        while True:
            sd, args = next_frame()
            if sd.get("kind") != "seed":
                break
            seed, n_in, n_par = int(sd["seed"]), int(sd["inputs"]), int(sd["params"])
            params = list(args[n_in:n_in + n_par])
            call = list(args[:n_in]) + (params[: max(0, n_params - n_in)] if n_params is not None else params)
            poison(last)
            t0 = time.perf_counter()
            try:
                if req.get("mode") == "time" and sdk.generation == device_sdk.NEW:
                    got_raw, neff = device_sdk.keep_neff(lambda c=call: run(*c), scratch)  # type: ignore[misc]
                else:
                    got_raw = run(*call)
            except Exception as e:  # noqa: BLE001 - the SDK's compile / runtime errors are the kernel's problems
                prob = _device_problem(e, kernel_path)
                result.problems.append(prob)
                result.seeds.append(SeedResult(seed=seed, correct=False, message=prob.message[:2000]))
                break
            seconds = time.perf_counter() - t0
            result.compiled = True
            got = device_sdk.outputs(got_raw)[:MAX_OUTPUTS]
            outs = [g if isinstance(g, np.ndarray) else None for g in got]
            after = [a if isinstance(a, np.ndarray) else None for a in call]
            meta = {"outputs": len(outs), "arguments": len(after), "mutated": [],
                    "kinds": [type(g).__name__ for g in got]}
            runs[str(seed)] = meta
            emit({"kind": "run", "seed": seed, **meta}, outs + after)
            result.seeds.append(SeedResult(seed=seed, correct=True, kernel_seconds=seconds))
            last = [g for g in outs if g is not None]
            timed = (call, last)
        if req.get("mode") == "time":
            timing = _time(sdk, kernel, timed, neff, settings, req, kernel_path, result, take, compare)
            emit(timing, [])
        broken = compare(before, take)
        if broken:
            result.problems.append(Problem("sim_sandbox_violation", "the kernel changed the Neuron SDK it runs on ("
                                           f"{', '.join(broken[:4])}): its results and latency cannot be trusted",
                                           location=SourceLocation(kernel_path, 1)))
            result.correct = False
    except device_sdk.SdkMissing as e:
        result.problems.append(Problem("runner_sdk_missing", str(e), location=SourceLocation(kernel_path, 1)))
    except NkiError as e:
        result.problems.append(Problem.from_error(e))
    except Exception as e:  # noqa: BLE001 - a bug of ours, or kernel code that broke the SDK
        result.problems.append(_device_problem(e, kernel_path))
    return {"ok": True, "result": result.as_dict(), "runs": runs}, []


def _time(sdk: Any, kernel: Any, timed: tuple[list[Any], list[Any]] | None, neff: str | None, settings: Any,
          req: dict[str, Any], kernel_path: str, result: Any, take: Any, compare: Any) -> dict[str, Any]:
    """The timing frame: raw figures of the checked launch's kernel, or why there are none."""
    from ...runner.latency import LoopPolicy
    from nki_agent.toolchain.judging import device_sdk

    if timed is None:
        return device_sdk.Timing(False, reason="the kernel did not run, so it was not timed").as_json()
    policy = LoopPolicy.from_json(req.get("policy"))
    before = take()
    try:
        if sdk.generation == device_sdk.CLASSIC:
            timing = device_sdk.time_classic(sdk, kernel, timed[0], settings.grid, policy)
        else:
            timing = device_sdk.time_new(sdk, kernel, timed[0], neff, timed[1], policy)
    except Exception as e:  # noqa: BLE001 - the SDK failed to time it: no latency, the problem says why
        p = _device_problem(e, kernel_path)
        result.problems.append(p)
        return device_sdk.Timing(False, reason=p.message).as_json()
    broken = compare(before, take)
    if broken:
        return device_sdk.Timing(False, reason=f"the kernel changed the SDK while it was timed ({broken[0]})").as_json()
    return timing.as_json()
