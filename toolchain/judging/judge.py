"""Verification whose verdict is computed where kernel code never runs: the parent is the judge.

On the simulator ``verify`` (and ``simulate``) runs three jailed workers (``_verify_traced``): the reference role
(task code; it sends seed 0's shapes first, then each seed's arrays and expected outputs), the tracer (kernel
code on placeholders: the task file — and any ``protect``-ed file — cannot be opened there, its bytecode cache
is empty; it sees shapes and dtypes only) and the executor (no user code: the traced program on each seed's
arrays; a warm one from ``isolation/standby.py`` when this process has one ready). A device role (and
``traced=False``) runs the kernel on each seed in its own worker instead (``_relay``). The expected outputs
exist only in this process; each seed is compared as its ``run`` frame arrives (``verdict.py``), input mutation
detected bit for bit against this process's own copy of what it sent; the workers' own reports (problems,
trace, "mutated", the store log that names the line of a first mismatch, the cost model's estimate) are
shown, never believed for the verdict. Besides seeds ``0..seeds-1``, ``hidden_seeds`` more are drawn here with
``secrets``: the reference worker draws them, the kernel's workers see only their position, and the result
reports them without their values (``results.verify_result``). The result is ``protocol.VerifyResult``.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nki_agent.toolchain.protocol import jobs as protocol
from nki_agent.toolchain.isolation import sandbox, standby
from nki_agent.toolchain.facts.errors import Problem, SourceLocation
from nki_agent.toolchain.judging.verdict import Compared as _Compared, judge_runs as _judge

OUTPUT_SLACK = 1 << 20  # bytes the kernel's reply may exceed 4x (expected outputs + inputs) by
EARLY_REPLY_BYTES = 64 << 20  # the kernel worker's reply cap before the reference has answered
TRACE_REPLY_BYTES = 256 << 20  # the tracer's reply: compressed programs (one per input signature) and problems


def verify(kernel: str, task: str, seeds: int, target: str | None, kernel_name: str | None, timeout: float,
           cancel: threading.Event | None, search_path: Sequence[str] = (), protect: Sequence[str] = (),
           hidden_seeds: int = 0, kernel_extra: Mapping[str, Any] | None = None, devices: Sequence[str] = (),
           env: Mapping[str, str] | None = None, traced: bool = True) -> protocol.VerifyResult:
    """Verify ``kernel`` on seeds ``0..seeds-1`` plus ``hidden_seeds`` secret ones, judged in this process.

    ``kernel_extra`` is merged into the kernel worker's request; ``devices`` / ``env`` go to its
    ``sandbox.Job`` when the sandbox has such fields (a device backend's NeuronCore). On the simulator the
    kernel is traced in its jail and the program executed in a clean one (``_verify_traced``); ``traced=False``
    runs the kernel on each seed in its own process instead (a device role always does: the device computes;
    benchmarks compare the two)."""
    import os

    from nki_agent.toolchain.judging.results import draw_hidden, verify_result

    seed_list = list(range(seeds)) + draw_hidden(hidden_seeds, seeds)
    base: dict[str, Any] = {"kernel": kernel, "task": task, "target": target or "", "compiled": False,
                            "correct": False, "seeds": [], "problems": []}
    sp = [str(p) for p in search_path]
    same = os.path.realpath(kernel) == os.path.realpath(task)
    hidden = tuple(os.path.abspath(p) for p in ([] if same else [task]) + list(protect)
                   if os.path.realpath(p) != os.path.realpath(kernel))
    from nki_agent.toolchain.cost.calibration import request_field

    ker_req = dict(request_field(), **(kernel_extra or {}))
    if traced and ker_req.get("role") != "device":  # on the simulator: traced in the kernel's jail, executed in a clean one
        return _verify_traced(kernel, task, seed_list, seeds, target, kernel_name, timeout, cancel, sp, hidden,
                              ker_req, base)
    ker_req = dict(ker_req, op="kernel", kernel=kernel, task=task, target=target, kernel_name=kernel_name,
                   search_path=sp)
    # its reply is capped small until the reference tells how large the real one can be
    ker_job = sandbox.Job(ker_req, hidden=hidden, max_result_bytes=EARLY_REPLY_BYTES,
                          **_device_fields(devices, env))
    t0 = time.monotonic()
    ref_w = sandbox.start(sandbox.Job({"op": "reference", "task": task, "seeds": len(seed_list),
                                       "seed_list": seed_list, "search_path": sp}), timeout=timeout, cancel=cancel)
    try:
        ker_w = sandbox.start(ker_job, timeout=timeout, cancel=cancel)
    except BaseException:
        ref_w.kill()
        ref_w.result()
        raise
    try:
        ref_w.close_input()
        settings, plan = _relay(ref_w, ker_w, seed_list)
        ref = ref_w.result()
        base["sandbox"] = ker_w.sandbox
        if ref.failed or settings is None or _problems(ref.body, none=True) or len(plan) != len(seed_list):
            ker_w.kill()
            ker_w.result()
            return verify_result(dict(base, problems=_problems(ref.body) if ref.failed or _problems(ref.body, none=True)
                                      else [_malformed(task, "the reference worker's stream is incomplete")],
                                      stderr=ref.stderr), seeds)
        runs: dict[int, tuple[dict[str, Any], list[np.ndarray | None]]] = {}
        compared = _Compared(settings, plan)
        for header, arrays in ker_w.stream():  # each seed's outputs, compared while the next seed runs
            if header.get("kind") == "run" and isinstance(header.get("seed"), int):
                runs.setdefault(int(header["seed"]), (header, arrays))
                compared.add(int(header["seed"]), *runs[int(header["seed"])])
        ker = ker_w.result()
    except BaseException:
        for w in (ref_w, ker_w):
            w.kill()
            w.result()
        raise
    if ker.failed or "result" not in ker.body:
        return verify_result(dict(base, problems=_problems(ker.body), stderr=ker.stderr), seeds)
    try:
        out, lines = _judge(ker.body, runs, plan, settings, kernel, task, compared)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        p = _malformed(kernel, f"the kernel worker's reply is malformed ({type(e).__name__}: {e})")
        return verify_result(dict(base, problems=[p], stderr=ker.stderr), seeds)
    out.update(sandbox=ker.sandbox, stderr=ker.stderr, seconds=round(time.monotonic() - t0, 3))
    return verify_result(out, seeds, lines)


def simulate(kernel: str, task: str, seed: int, target: str | None, kernel_name: str | None, timeout: float,
             cancel: threading.Event | None, search_path: Sequence[str] = ()) -> protocol.SimulateResult:
    """One run of the kernel on ``seed``'s inputs, no reference check, through the verdict's path: the task draws
    the inputs in its worker (the reference is not run), the kernel is traced in its jail, the program executed
    in a clean one; outputs, peaks and the estimate come from the executor, never from the kernel's process."""
    import os

    from nki_agent.toolchain.cost.calibration import request_field
    from nki_agent.toolchain.judging.results import simulate_result

    sp = [str(p) for p in search_path]
    same = os.path.realpath(kernel) == os.path.realpath(task)
    hidden = () if same else (os.path.abspath(task),)
    base: dict[str, Any] = {"kernel": kernel, "task": task, "target": target or "", "compiled": False,
                            "correct": False, "seeds": [], "problems": []}
    run: dict[str, Any] = {}
    res = _verify_traced(kernel, task, [seed], 1, target, kernel_name, timeout, cancel, sp, hidden,
                         dict(request_field()), base, simulation=run)
    return simulate_result(res, run)


def _verify_traced(kernel: str, task: str, seed_list: list[int], seeds: int, target: str | None,
                   kernel_name: str | None, timeout: float, cancel: threading.Event | None, sp: list[str],
                   hidden: tuple[str, ...], extra: dict[str, Any], base: dict[str, Any],
                   simulation: dict[str, Any] | None = None) -> protocol.VerifyResult:
    """Three jailed workers: the reference (task code), the tracer (kernel code, placeholders only) and the
    executor (no user code: the traced program on each seed's arrays); the verdict is computed here.

    ``simulation`` (a dict, filled here): a simulation, not a verification — the task's worker draws inputs
    without running its reference, nothing is compared, and the dict receives the first seed's ``inputs`` and
    ``outputs`` arrays as the executor computed them."""
    from nki_agent.toolchain.judging.results import verify_result

    t0 = time.monotonic()
    ref_w = sandbox.start(sandbox.Job({"op": "reference", "task": task, "seeds": len(seed_list),
                                       "seed_list": seed_list, "search_path": sp,
                                       "inputs_only": simulation is not None, "shapes": simulation is None}),
                                      timeout=timeout, cancel=cancel)
    started = [ref_w]
    try:
        tr_w = sandbox.start(sandbox.Job(dict(extra, op="trace", kernel=kernel, task=task, target=target,
                                              kernel_name=kernel_name, search_path=sp),
                                         hidden=hidden, max_result_bytes=TRACE_REPLY_BYTES),
                             timeout=timeout, cancel=cancel)
        started.append(tr_w)
        # no user file is bound into the executor's jail: it gets the kernel's text for messages, never runs it;
        # a warm one (``standby``) when this process has one ready
        ex_job = _executor_job(extra, hidden)
        ex_w = standby.claim(ex_job, timeout, cancel=cancel) or sandbox.start(ex_job, timeout=timeout, cancel=cancel)
        started.append(ex_w)
        ex_w.send({"kind": "job", "kernel_file": kernel, "task_file": task, "target": target,
                   "source": _source(kernel)})
    except BaseException:
        for w in started:
            w.kill()
            w.result()
        raise
    try:
        ref_w.close_input()
        settings, plan = _relay_traced(ref_w, tr_w, ex_w, seed_list)
        ref = ref_w.result()
        trace = tr_w.result()
        if cancel is None or not cancel.is_set():  # the next one warms on the core the reference and tracer left
            standby.prepare(ex_job, timeout)
        base["sandbox"] = tr_w.sandbox
        if ref.failed or settings is None or _problems(ref.body, none=True) or len(plan) != len(seed_list):
            ex_w.kill()
            ex_w.result()
            return verify_result(dict(base, problems=_problems(ref.body) if ref.failed or _problems(ref.body, none=True)
                                      else [_malformed(task, "the reference worker's stream is incomplete")],
                                      stderr=ref.stderr), seeds)
        runs: dict[int, tuple[dict[str, Any], list[np.ndarray | None]]] = {}
        compared = _Compared(settings, plan) if simulation is None else None
        for header, arrays in ex_w.stream():  # each seed compared as it arrives, while the next one runs
            if header.get("kind") == "run" and isinstance(header.get("seed"), int):
                runs.setdefault(int(header["seed"]), (header, arrays))
                if compared is not None:
                    compared.add(int(header["seed"]), *runs[int(header["seed"])])
        ex = ex_w.result()
    except BaseException:
        for w in started:
            w.kill()
            w.result()
        raise
    trace_problems = _problems(trace.body) if trace.failed else _problems(trace.body, none=True)
    if ex.failed or "result" not in ex.body:
        return verify_result(dict(base, problems=trace_problems + _problems(ex.body), stderr=trace.stderr), seeds)
    body = ex.body
    res = body["result"] if isinstance(body.get("result"), dict) else {}
    if simulation is not None:
        return _simulated(res, runs, plan, trace_problems, base, simulation, trace.stderr, tr_w.sandbox, t0)
    if trace_problems:  # a trace-time error is the kernel's first problem; a tripwire makes it unverified
        res = dict(res, problems=trace_problems + [p for p in list(res.get("problems", [])) if isinstance(p, dict)])
        body = dict(body, result=res)
    try:
        out, lines = _judge(body, runs, plan, settings, kernel, task, compared)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        p = _malformed(kernel, f"the executor's reply is malformed ({type(e).__name__}: {e})")
        return verify_result(dict(base, problems=trace_problems + [p], stderr=trace.stderr), seeds)
    out.update(sandbox=tr_w.sandbox, stderr=trace.stderr, seconds=round(time.monotonic() - t0, 3))
    return verify_result(out, seeds, lines)


def _simulated(res: dict[str, Any], runs: dict[int, tuple[dict[str, Any], list[np.ndarray | None]]],
               plan: list[dict[str, Any]], trace_problems: list[dict[str, Any]], base: dict[str, Any],
               simulation: dict[str, Any], stderr: str, sandbox_label: str, t0: float) -> protocol.VerifyResult:
    """A simulation's figures from the executor's reply (its seeds judged nothing: none are kept); the first
    seed's input and output arrays go into ``simulation``."""
    from nki_agent.toolchain.judging.results import verify_result

    problems = trace_problems + [p for p in list(res.get("problems", [])) if isinstance(p, dict)]
    out = {k: res[k] for k in ("target", "generation", "compiled", "peak_sbuf_bytes", "peak_psum_bytes", "trace",
                               "estimate") if k in res}
    if plan:
        simulation["inputs"] = plan[0]["send"][: plan[0]["inputs"]]
    frame = runs.get(0)
    if frame is not None:
        header, arrays = frame
        n_out = int(header.get("outputs", 0))
        if 0 <= n_out <= len(arrays):
            simulation["outputs"] = arrays[:n_out]
            simulation["kinds"] = [str(k) for k in list(header.get("kinds", []))[:n_out]]
    return verify_result(dict(base, **out, problems=problems, sandbox=sandbox_label, stderr=stderr,
                              seconds=round(time.monotonic() - t0, 3)), 1)


def _executor_job(extra: dict[str, Any], hidden: tuple[str, ...]) -> sandbox.Job:
    """The executor's job: the same for every verification with these settings (its job frame says which
    kernel), so a warm one can be started before it is known. Of the hidden files only those its jail could
    see at all are hidden (its jail binds no user folder)."""
    from nki_agent.toolchain.isolation import jail

    return sandbox.Job(dict(extra, op="execute"), hidden=tuple(p for p in hidden if jail.visible(p)),
                       max_result_bytes=EARLY_REPLY_BYTES, imports_only=True)


def _source(path: str) -> str | None:
    """The kernel file's text, for the executor's messages (it never runs it)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(5 << 20)
    except OSError:
        return None


def _relay_traced(ref_w: sandbox.Worker, tr_w: sandbox.Worker, ex_w: sandbox.Worker,
                  seed_list: Sequence[int]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The reference's settings go to the tracer and the executor; each seed's shapes and dtypes (a new
    signature only) to the tracer, whose program is forwarded to the executor; each seed's arrays go to the
    executor once its program is there. The tracer never sees an array's values."""
    from nki_agent.toolchain.judging.trace_roles import spec_of

    lock = threading.Lock()
    ready: set[str] = set()
    waiting: list[tuple[str, dict[str, Any]]] = []
    budget = [OUTPUT_SLACK]

    def send_seed(s: dict[str, Any]) -> None:
        budget[0] += 4 * sum(a.nbytes for a in s["send"] + s["expected"])
        ex_w.result_pipe.limit = max(budget[0], EARLY_REPLY_BYTES)
        ex_w.send({"kind": "seed", "key": s["key"], **{k: s[k] for k in ("seed", "inputs", "params",
                                                                         "reference_seconds")}}, s["send"])

    def forward_programs() -> None:
        for header, arrays in tr_w.stream():
            key = header.get("key")
            if header.get("kind") != "program" or not isinstance(key, str) or len(arrays) != 1:
                break
            with lock:
                if key in ready or key not in asked:  # a program nobody asked for never reaches the executor
                    continue
                ex_w.send({"kind": "program", "key": key}, arrays)
                ready.add(key)
                for k, s in [w for w in waiting if w[0] == key]:
                    send_seed(s)
                waiting[:] = [w for w in waiting if w[0] != key]

    asked: set[str] = set()  # the signatures the tracer was sent (each added before its spec frame goes out)
    forwarder = threading.Thread(target=forward_programs, name="nki-judge-programs", daemon=True)
    forwarder.start()
    settings: dict[str, Any] | None = None
    plan: list[dict[str, Any]] = []
    try:
        for header, arrays in ref_w.stream():
            kind = header.get("kind")
            if kind == "settings" and settings is None and isinstance(header.get("settings"), dict):
                settings = header["settings"]
                tr_w.send({"kind": "settings", "settings": settings})
                ex_w.send({"kind": "settings", "settings": settings})
            elif kind == "shapes" and settings is not None and not plan and not asked:
                # seed 0's shapes before its reference runs: the kernel is traced meanwhile. A hint only: the
                # seed frame's own arrays decide which program each seed runs (another signature is traced then)
                spec = _spec_hint(header.get("spec"))
                if spec is not None and isinstance(header.get("inputs"), int):
                    key = json.dumps([header["inputs"], spec])
                    asked.add(key)
                    tr_w.send({"kind": "spec", "key": key, "spec": spec, "inputs": header["inputs"]})
            elif kind == "shapes":
                continue
            elif kind == "seed" and settings is not None and len(plan) < len(seed_list):
                s = _seed_plan(header, arrays)
                if s["seed"] != seed_list[len(plan)]:
                    raise ValueError("the reference drew another seed than asked")
                s["seed"] = len(plan)  # the label
                spec = spec_of(s["send"])
                s["key"] = key = json.dumps([s["inputs"], spec])
                plan.append(s)
                if key not in asked:
                    asked.add(key)
                    tr_w.send({"kind": "spec", "key": key, "spec": spec, "inputs": s["inputs"]})
                with lock:
                    if key in ready:
                        send_seed(s)
                    else:
                        waiting.append((key, s))
            else:
                break  # the reply (or garbage): the stream is over
    except (KeyError, TypeError, ValueError, IndexError):
        settings = None  # a malformed seed frame: nothing from this reference is used
    tr_w.send({"kind": "end"})
    tr_w.close_input()
    forwarder.join()
    with lock:
        waiting.clear()  # seeds whose signature the kernel could not trace: its problem says why
        ex_w.send({"kind": "end"})
        ex_w.close_input()
    return settings, plan


def _spec_hint(spec: Any) -> list[dict[str, Any]] | None:
    """A ``shapes`` frame's spec, rebuilt from its fields (shapes as ints, dtype names the wire knows), or None."""
    from nki_agent.toolchain.protocol.wire import plain_dtype

    if not isinstance(spec, list) or len(spec) > 64:
        return None
    out = []
    for s in spec:
        if not isinstance(s, dict) or not isinstance(s.get("shape"), list) or not isinstance(s.get("dtype"), str) \
                or len(s["shape"]) > 8 or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 40
                                                  for d in s["shape"]):
            return None
        try:
            plain_dtype(s["dtype"])
        except (ValueError, TypeError):
            return None
        out.append({"shape": [int(d) for d in s["shape"]], "dtype": str(s["dtype"])})
    return out


def _device_fields(devices: Sequence[str], env: Mapping[str, str] | None) -> dict[str, Any]:
    """``devices`` / ``env`` for ``sandbox.Job``, for the fields it has (a sandbox without them gets neither)."""
    names = {f.name for f in dataclasses.fields(sandbox.Job)}
    out: dict[str, Any] = {}
    if devices and "devices" in names:
        out["devices"] = tuple(devices)
    if env and "env" in names:
        out["env"] = dict(env)
    return out


def _relay(ref_w: sandbox.Worker, ker_w: sandbox.Worker,
           seed_list: Sequence[int]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """Pass the reference's settings and each seed's arguments to the kernel worker as they arrive; the
    kernel worker's reply cap grows with what it may send back (4x the seed's arrays). Seeds are
    labelled by their position in ``seed_list``: the kernel worker never learns a hidden seed's value."""
    settings: dict[str, Any] | None = None
    plan: list[dict[str, Any]] = []
    budget = OUTPUT_SLACK
    try:
        for header, arrays in ref_w.stream():
            kind = header.get("kind")
            if kind == "settings" and settings is None and isinstance(header.get("settings"), dict):
                settings = header["settings"]
                ker_w.send({"kind": "settings", "settings": settings})
            elif kind == "seed" and settings is not None and len(plan) < len(seed_list):
                s = _seed_plan(header, arrays)
                if s["seed"] != seed_list[len(plan)]:
                    raise ValueError("the reference drew another seed than asked")
                s["seed"] = len(plan)  # the label
                plan.append(s)
                budget += 4 * sum(a.nbytes for a in s["send"] + s["expected"])
                ker_w.result_pipe.limit = max(budget, EARLY_REPLY_BYTES)
                ker_w.send({"kind": "seed", **{k: s[k] for k in ("seed", "inputs", "params", "reference_seconds")}},
                           s["send"])
            else:
                break  # the reply (or garbage): the stream is over
    except (KeyError, TypeError, ValueError, IndexError):
        settings = None  # a malformed seed frame: nothing from this reference is used
    ker_w.send({"kind": "end"})
    ker_w.close_input()
    return settings, plan


def _malformed(path: str, message: str) -> dict[str, Any]:
    return Problem("sim_worker_crash", message, location=SourceLocation(path, 1)).as_dict()


def _problems(body: dict[str, Any], none: bool = False) -> list[dict[str, Any]]:
    """The problems a worker's reply reports (``none``: [] when it reports none, instead of a generic one)."""
    if "problem" in body:
        return [body["problem"]]
    if isinstance(body.get("problems"), list) and body["problems"]:
        return list(body["problems"])
    if none:
        return []
    return [Problem(str(body.get("code", "sim_worker_crash")), str(body.get("error", "verification failed"))).as_dict()]


def _seed_plan(header: dict[str, Any], arrays: list[np.ndarray | None]) -> dict[str, Any]:
    """One seed: the arguments to send (inputs, parameters) and the expected outputs."""
    n_in, n_par, n_exp = int(header["inputs"]), int(header["params"]), int(header["expected"])
    if min(n_in, n_par, n_exp) < 0 or len(arrays) != n_in + n_par + n_exp or any(a is None for a in arrays):
        raise ValueError("the reference's seed frame does not match its header")
    return {"seed": int(header["seed"]), "inputs": n_in, "params": n_par,
            "reference_seconds": float(header["reference_seconds"]), "send": list(arrays[:n_in + n_par]),
            "expected": list(arrays[n_in + n_par:])}
