"""Confined verification of untrusted kernels: the reference runs first, the comparison runs elsewhere.

Worker side (``worker_verify``, inside the sandboxed worker): load the task, draw every seed's inputs
and run the reference, write the expected outputs into a directory the parent created, drop them and
the task module, install the audit-hook guard (``guard.install``), and only then load and run the
kernel, writing its outputs (raw bytes) into the worker's output directory. A request's
``search_path`` (the user's kernel folder, for a candidate verified from a temp copy) is importable
by task and kernel after their own folder; the guard keeps the task file (and its cached bytecode)
closed even there, and ``protect`` adds more such files.

Parent side (``verify_confined``, never runs kernel code): create the private directories, run the
worker, read expected and actual outputs and compare them with ``verify``'s own functions, so a kernel
that monkeypatches NumPy or forges its reply cannot make a wrong result pass.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from . import dtypes, sandbox
from .errors import NkiError, Problem, SourceLocation

MANIFEST = "manifest.json"
MAX_OUTPUTS = 64  # outputs per seed read back; kernels return a handful
OUTPUT_SLACK = 1 << 20  # bytes a kernel output may exceed 4x the expected outputs (shape mistakes stay reportable)
TASK_MODULE = "nki_agent_task"  # the name tasks.load_task gives the task module


def _file(directory: str, seed: int, index: int) -> str:
    return os.path.join(directory, f"s{seed}_o{index}.bin")


def _meta(a: np.ndarray) -> dict[str, Any]:
    return {"dtype": dtypes.name(a.dtype), "shape": [int(d) for d in a.shape]}


# ---------------------------------------------------------------------------------------------- worker


def worker_verify(req: dict[str, Any]) -> dict[str, Any]:
    """The ``verify_confined`` op of the worker; returns the worker reply (untrusted by the parent)."""
    from .tasks import load_task, search_path, strings
    from .verify import VerifyResult

    kernel_path, task_path = req["kernel"], req["task"]
    expected_dir, out_dir = req["expected_dir"], req["out_dir"]
    result = VerifyResult(kernel=kernel_path, task=task_path, target=req.get("target") or "")
    try:
        task = load_task(task_path, search_path(req))
        cases = _reference_phase(task, int(req.get("seeds", 3)), expected_dir)
    except NkiError as e:
        result.problems.append(Problem.from_error(e))
        return {"ok": True, "result": result.as_dict(), "runs": {}}
    except Exception as e:  # the task's own code failed (inputs, reference)
        result.problems.append(_task_problem(e, task_path))
        return {"ok": True, "result": result.as_dict(), "runs": {}}
    settings = _settings(task)
    del task
    secrets = _secret_files(kernel_path, [task_path, *strings(req.get("protect"))])
    sys.modules.pop(TASK_MODULE, None)  # the kernel must not reach the reference through sys.modules
    _forget_modules(secrets)  # nor through the task imported under its own name (e.g. by a helper)
    gc.collect()

    from . import guard

    guard.install(out_dir, [expected_dir, *secrets])
    return _kernel_phase(req, settings, cases, out_dir)


def _secret_files(kernel_path: str, files: list[str]) -> list[str]:
    """The files the kernel may not open: ``files`` except the kernel itself (a file that is its own task)."""
    kernel = os.path.realpath(kernel_path)
    return [f for f in dict.fromkeys(files) if os.path.realpath(f) != kernel]


def _forget_modules(files: list[str]) -> None:
    """Drop every loaded module whose source is one of ``files`` from ``sys.modules``."""
    real = {os.path.realpath(f) for f in files}
    for name, module in list(sys.modules.items()):
        origin = _origin(module)
        if origin is not None and os.path.realpath(origin) in real:
            sys.modules.pop(name, None)


def _origin(module: Any) -> str | None:
    try:
        origin = getattr(module, "__file__", None)
    except Exception:  # noqa: BLE001 - a lazy module whose attribute access fails is not the task
        return None
    return origin if isinstance(origin, str) else None


def _reference_phase(task: Any, seeds: int, expected_dir: str) -> list[tuple[int, list[Any], list[Any], float]]:
    """Per seed: inputs, model parameters and reference seconds; expected outputs go to disk only."""
    from .verify import _to_np, draw

    cases = []
    manifest: dict[str, Any] = {"seeds": []}
    for seed in range(seeds):
        inputs, expected, t_ref = draw(task, seed)
        params = [_to_np(p) for p in task.model_parameters()]
        outs = []
        for i, e in enumerate(expected):
            arr = np.ascontiguousarray(e)
            with open(_file(expected_dir, seed, i), "wb") as f:
                f.write(arr.tobytes())
            outs.append(_meta(arr))
            if arr.flags.writeable and arr.size:
                arr.fill(0)  # do not leave the answer in freed memory the kernel could scan
        del expected
        manifest["seeds"].append({"seed": seed, "reference_seconds": t_ref, "outputs": outs})
        cases.append((seed, [_to_np(x) for x in inputs], params, t_ref))
    manifest.update(tolerance=task.tolerance, grid=list(task.grid), lnc=task.lnc, kernel_name=task.kernel_name,
                    target=task.target, allow_input_mutation=task.allow_input_mutation, path=task.path)
    with open(os.path.join(expected_dir, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(manifest, f)
    task._model = None  # the Model instance of the last seed
    return cases


def _settings(src: Any) -> Any:
    """A Task carrying only settings (launcher, tolerance, mutation policy): no module, no reference."""
    import types

    from .tasks import Task

    get = (lambda k, d=None: src.get(k, d)) if isinstance(src, dict) else (lambda k, d=None: getattr(src, k, d))
    return Task(path=str(get("path", "")), module=types.ModuleType("nki_agent_task_settings"),
                get_inputs=list, reference=None, model_class=None, get_init_inputs=None,
                tolerance={str(k): float(v) for k, v in dict(get("tolerance") or {}).items()},
                grid=tuple(int(g) for g in (get("grid") or ())), kernel_name=get("kernel_name"),
                allow_input_mutation=bool(get("allow_input_mutation", False)), target=get("target"),
                lnc=int(get("lnc")) if get("lnc") else None)


def _kernel_phase(req: dict[str, Any], settings: Any, cases: list[tuple[int, list[Any], list[Any], float]],
                  out_dir: str) -> dict[str, Any]:
    from .tasks import find_kernel, load_module, search_path
    from .verify import Case, SeedResult, VerifyResult, run_cases, select_params

    write = _writer(out_dir)  # captured before any kernel code runs
    kernel_path = req["kernel"]
    result = VerifyResult(kernel=kernel_path, task=req["task"], target=req.get("target") or "")
    runs: dict[str, Any] = {}
    try:
        kernel = find_kernel(load_module(kernel_path, "nki_agent_kernel", search_path(req)),
                             req.get("kernel_name") or settings.kernel_name)
        launch_cases = [Case(seed, inputs + select_params(kernel, params, len(inputs)), t_ref)
                        for seed, inputs, params, t_ref in cases]

        def judge(seed: int, got: list[Any], expected: Any, mutated: list[str]) -> SeedResult:
            runs[str(seed)] = {"outputs": [write(seed, i, g) for i, g in enumerate(got[:MAX_OUTPUTS])],
                               "mutated": mutated}
            return SeedResult(seed=seed, correct=True)

        with _tensor_outputs_only(kernel_path):
            result = run_cases(kernel, settings, kernel_path, launch_cases, judge, req.get("target"),
                               req.get("time_limit"))
    except NkiError as e:
        result.problems.append(Problem.from_error(e))
    except Exception as e:  # a bug of ours, or kernel code that broke the toolchain it runs in
        result.problems.append(Problem("sim_python_exception", f"{type(e).__name__}: {e}",
                                       location=SourceLocation(kernel_path, 1)))
    _mark_violations(result, kernel_path)
    return {"ok": True, "result": result.as_dict(), "runs": runs}


def _writer(out_dir: str) -> Any:
    """Write one kernel output as raw bytes; the functions it needs are bound now, before kernel code."""
    os_open, os_write, os_close, join = os.open, os.write, os.close, os.path.join
    tobytes, ascontiguous, ndarray, name = np.ndarray.tobytes, np.ascontiguousarray, np.ndarray, dtypes.name
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)

    def write(seed: int, index: int, value: Any) -> dict[str, Any] | None:
        if not isinstance(value, ndarray):
            return None
        arr = ascontiguous(value)
        fd = os_open(join(out_dir, f"s{seed}_o{index}.bin"), flags, 0o600)
        try:
            data = memoryview(tobytes(arr))
            while data:
                data = data[os_write(fd, data):]
        finally:
            os_close(fd)
        return {"dtype": name(arr.dtype), "shape": [int(d) for d in arr.shape]}

    return write


@contextmanager
def _tensor_outputs_only(kernel_path: str) -> Iterator[None]:
    """Refuse kernel outputs that are not simulator tensors (an answer computed in NumPy, outside NKI)."""
    from .location import caller_location
    from .sim import kernel as simkernel
    from .sim.tensor import Tensor

    original = simkernel._to_numpy

    def checked(x: Any) -> Any:
        if x is not None and not isinstance(x, (Tensor, tuple, list, dict)):
            raise NkiError("sim_sandbox_violation",
                           f"the kernel returned a {type(x).__module__}.{type(x).__name__}, not an NKI tensor: in "
                           "confined verification outputs must be NKI tensors the kernel wrote (e.g. "
                           "nl.ndarray(..., buffer=nl.shared_hbm) filled with nl.store / nisa.dma_copy)",
                           caller_location() or SourceLocation(kernel_path, 1))
        return original(x)

    simkernel._to_numpy = checked  # type: ignore[assignment]
    try:
        yield
    finally:
        simkernel._to_numpy = original  # type: ignore[assignment]


def _mark_violations(result: Any, kernel_path: str) -> None:
    """Refused operations become ``sim_sandbox_violation`` problems, even when the kernel caught them."""
    from . import guard

    found = False
    for i, p in enumerate(result.problems):
        if p.code == "sim_python_exception" and "SandboxViolation" in p.message:
            result.problems[i] = Problem("sim_sandbox_violation", p.message, p.severity, p.location, p.related)
        found = found or result.problems[i].code == "sim_sandbox_violation"
    seen = guard.violations()
    if seen and not found:
        result.problems.append(Problem("sim_sandbox_violation", "confined verification forbids " + "; ".join(seen[:5]),
                                       location=SourceLocation(kernel_path, 1)))
    if seen or found:
        result.correct = False


def _task_problem(e: Exception, task_path: str) -> Problem:
    from .location import traceback_location

    return Problem("sim_task_error", f"{type(e).__name__} in task code: {e}",
                   location=traceback_location(e.__traceback__) or SourceLocation(task_path, 1))


# ---------------------------------------------------------------------------------------------- parent


def verify_confined(kernel: str, task: str, seeds: int, target: str | None, kernel_name: str | None,
                    timeout: float, cancel: threading.Event | None, search_path: Sequence[str] = (),
                    protect: Sequence[str] = ()) -> dict[str, Any]:
    """Verify in a confined worker and compare here; the result dict of ``verify.VerifyResult.as_dict``.

    ``search_path``: folders task and kernel may import from after their own; ``protect``: files the
    kernel may not open besides the task file (``api.verify``)."""
    base: dict[str, Any] = {"kernel": kernel, "task": task, "target": target or "", "compiled": False,
                            "correct": False, "seeds": [], "problems": []}
    root = tempfile.mkdtemp(prefix="nki-confined-")
    try:
        expected_dir, out_dir = os.path.join(root, "expected"), os.path.join(root, "out")
        os.mkdir(expected_dir, 0o700)
        os.mkdir(out_dir, 0o700)
        req = {"op": "verify_confined", "kernel": kernel, "task": task, "seeds": seeds, "target": target,
               "kernel_name": kernel_name, "expected_dir": expected_dir, "out_dir": out_dir,
               "search_path": [str(p) for p in search_path], "protect": [os.path.abspath(p) for p in protect]}
        reply = sandbox.run(req, timeout=timeout, cancel=cancel)
        if "result" not in reply:
            return _failed(reply, base)
        try:
            return _judge(reply, expected_dir, out_dir, kernel, task)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, OSError) as e:
            p = Problem("sim_worker_crash", f"the confined worker's reply is malformed ({type(e).__name__}: {e})",
                        location=SourceLocation(kernel, 1))
            return dict(base, problems=[p.as_dict()])
    finally:
        _remove(root)


def _failed(reply: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    if "problem" in reply:
        return dict(base, problems=[reply["problem"]])
    p = Problem(reply.get("code", "sim_worker_crash"), reply.get("error", "verification failed"))
    return dict(base, problems=[p.as_dict()])


def _judge(reply: dict[str, Any], expected_dir: str, out_dir: str, kernel: str, task: str) -> dict[str, Any]:
    """Rebuild the verify result from the trusted manifest, the kernel's output files and the reply."""
    from .verify import SeedResult, VerifyResult, _compare_all, mark_mutated, tolerance_for

    res, runs = reply["result"], reply.get("runs") or {}
    manifest_path = os.path.join(expected_dir, MANIFEST)
    manifest = None
    if os.path.isfile(manifest_path):
        with open(manifest_path, encoding="utf-8") as f:
            manifest = json.load(f)
    problems = [Problem.from_dict(p) for p in res.get("problems", [])]
    out = VerifyResult(kernel=kernel, task=task, target=str(res.get("target", "")),
                       generation=str(res.get("generation", "")), compiled=bool(res.get("compiled")),
                       problems=problems, peak_sbuf_bytes=int(res.get("peak_sbuf_bytes", 0)),
                       peak_psum_bytes=int(res.get("peak_psum_bytes", 0)), trace=list(res.get("trace", [])))
    if manifest is None:  # the task failed before any reference ran: nothing can be correct
        out.compiled = False
        return out.as_dict()
    settings = _settings(manifest)
    trusted = {int(m["seed"]): m for m in manifest["seeds"]}
    budget = sum(_nbytes(o) for m in manifest["seeds"] for o in m["outputs"]) * 4 + OUTPUT_SLACK
    for sd in list(res.get("seeds", []))[: len(trusted)]:
        seed = int(sd["seed"])
        run, m = runs.get(str(seed)), trusted.get(seed)
        if run is None or m is None:  # the launch failed (its problem is reported) or the reply lies
            out.seeds.append(SeedResult(seed=seed, correct=False, message=str(sd.get("message", ""))[:2000]))
            continue
        expected = [_read(_file(expected_dir, seed, i), o, None) for i, o in enumerate(m["outputs"])]
        try:
            got = [_read(_file(out_dir, seed, i), o, budget) if o is not None else None
                   for i, o in enumerate(list(run.get("outputs", []))[:MAX_OUTPUTS])]
        except (OSError, ValueError, KeyError, TypeError) as e:
            out.seeds.append(SeedResult(seed=seed, correct=False,
                                        message=f"the kernel's outputs could not be read back: {e}"))
            continue
        r = _compare_all(settings, got, expected, seed)
        r.kernel_seconds, r.reference_seconds = float(sd.get("kernel_seconds", 0.0)), float(m["reference_seconds"])
        mutated = [str(x) for x in run.get("mutated", [])]
        if mutated and not settings.allow_input_mutation:
            mark_mutated(r, mutated)
        out.seeds.append(r)
        out.atol, out.rtol = tolerance_for(settings, [g for g in got if g is not None])
    violated = any(p.code == "sim_sandbox_violation" for p in problems)
    out.correct = (out.compiled and len(out.seeds) == len(trusted) and all(s.correct for s in out.seeds)
                   and not violated)
    d = out.as_dict()
    d["confined"] = True
    return d


def _nbytes(meta: dict[str, Any]) -> int:
    return int(np.prod(meta["shape"], dtype=np.int64)) * dtypes.as_dtype(meta["dtype"]).itemsize


def _read(path: str, meta: Any, budget: int | None) -> np.ndarray:
    """One output file as an array; sizes and dtypes of untrusted files are checked before reading."""
    if not isinstance(meta, dict):
        raise TypeError("output metadata is not an object")
    dt = dtypes.as_dtype(str(meta["dtype"]))
    if dt.kind not in "biufcV" or dt.fields is not None or dt.hasobject:
        raise ValueError(f"output dtype {dt} is not a tensor dtype")
    shape = tuple(int(d) for d in meta["shape"])
    if any(d < 0 for d in shape) or len(shape) > 8:
        raise ValueError(f"output shape {list(shape)} is invalid")
    size = _nbytes({"dtype": meta["dtype"], "shape": list(shape)})
    if budget is not None and size > budget:
        return np.full(1, np.nan, np.float32)  # far larger than the reference: a mismatch, not a read
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            raise ValueError(f"{os.path.basename(path)} holds {st.st_size} bytes, metadata says {size}")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(size)
    finally:
        os.close(fd)
    return np.frombuffer(data, dtype=dt).reshape(shape).copy()


def _remove(root: str) -> None:
    """Delete the job's directories even if the kernel chmod-ed things inside its output directory."""
    for dirpath, dirnames, _ in os.walk(root):
        for d in dirnames:
            try:
                os.chmod(os.path.join(dirpath, d), 0o700, follow_symlinks=False)
            except (OSError, NotImplementedError):
                pass
    shutil.rmtree(root, ignore_errors=True)
