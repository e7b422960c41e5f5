"""A real remote runner for the security tests: ``nki-agent runner serve`` as a subprocess on 127.0.0.1.

- ``RunnerProcess`` — the service in its own session (``--port 0``: the bound URL is read from its
  "listening on" stdout line, a bounded wait on a line queue, never a sleep), stderr in a log file;
  ``ensure`` starts it again after a kernel killed or froze it (the test that did so has failed).
- ``RunnerWorld`` — the runner of the hostile corpus's ``runner`` mode: its own token and a second
  client's token are canaries (the token also in ``NKI_AGENT_RUNNER_TOKEN`` and the other secret
  variables of its environment, and in ``$HOME/.aws/credentials``); its HOME, cwd and TMPDIR are folders
  of its own, checked like a scene's, and its job folders must be gone after every job.
- ``request`` / ``submit`` / ``follow`` — one job over HTTP: ``POST /v1/jobs``, then the job's event
  stream up to its final ``status`` event (the raw stream is kept: it is one of the outputs checked).

Every address here is 127.0.0.1; no API key is needed.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
from security_helpers import SECRET_VARS, TOOLS, Scene, _state, make_canary

START_BOUND = 120.0  # seconds for a fresh runner to import FastAPI and the toolchain on a loaded machine
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
TOKEN_ENV = "NKI_AGENT_RUNNER_TOKEN"


class RunnerGone(Exception):
    """The runner process exited or stayed stopped (SIGSTOP) while it should have answered."""


class RunnerProcess:
    """``nki-agent runner serve --host 127.0.0.1 --port 0 --state-dir STATE ARGS`` in its own session."""

    def __init__(self, state_dir: Path, log: Path, env: dict[str, str], args: Sequence[str] = (),
                 cwd: Path | None = None) -> None:
        self.state_dir, self.log, self.env, self.args, self.cwd = state_dir, log, env, list(args), cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.stdout: list[str] = []
        self.restarts = 0

    def start(self) -> None:
        argv = [sys.executable, "-m", "nki_agent", "runner", "serve", "--host", "127.0.0.1", "--port", "0",
                "--state-dir", str(self.state_dir), *self.args]
        with open(self.log, "ab") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                         env=dict(self.env, PYTHONUNBUFFERED="1"), start_new_session=True,
                                         cwd=str(self.cwd) if self.cwd else None)
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc, lines), daemon=True).start()
        deadline = time.monotonic() + START_BOUND
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
                self.kill()
                raise RuntimeError(f"the runner did not start listening (exit {self.proc.poll()}):\n{tail}")
            found = LISTENING.search(line)
            if found:
                self.url = found.group(1)
                return

    def _read(self, proc: subprocess.Popen[bytes], lines: queue.Queue[str | None]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            text = raw.decode("utf-8", "replace")
            self.stdout.append(text)
            lines.put(text)
        lines.put(None)

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else -1

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and _state(self.proc.pid) != "T"

    def ensure(self) -> None:
        if not self.alive():
            if self.proc is not None:
                self.close()
                self.restarts += 1
            self.start()

    def client(self, token: str | None, timeout: float = 120.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, trust_env=False,
                            timeout=httpx.Timeout(timeout, connect=10.0))

    def kill(self) -> None:
        """SIGKILL the runner (its jails die with it: bwrap's --die-with-parent) and reap it."""
        if self.proc is None:
            return
        try:
            os.kill(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait(30)

    def close(self) -> None:
        """SIGTERM (a graceful stop), SIGKILL to its process group if it does not end."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)  # a kernel may have stopped it
                self.proc.terminate()
                self.proc.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def jobs_in_store(self, nonce: str) -> int:
        """How many jobs with ``nonce`` the runner's database holds (read-only, beside the live runner)."""
        db = sqlite3.connect(f"file:{self.state_dir / 'runner.sqlite3'}?mode=ro", uri=True, timeout=30)
        try:
            return int(db.execute("SELECT COUNT(*) FROM jobs WHERE nonce=?", (nonce,)).fetchone()[0])
        finally:
            db.close()


# ----------------------------------------------------------------------------------------- one job
def request(kernel_name: str, kernel_text: str, task_text: str | None, *, op: str = "verify", seeds: int = 2,
            timeout: float = 30.0, nonce: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"op": op, "kernel": {"name": kernel_name, "text": kernel_text}, "seeds": seeds,
                            "timeout_s": timeout}
    if task_text is not None:
        body["task"] = {"name": "task.py", "text": task_text}
    if nonce is not None:
        body["nonce"] = nonce
    return body


def submit(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """POST /v1/jobs; the accepted job's status (anything but 202 raises, with the runner's answer)."""
    r = client.post("/v1/jobs", json=body)
    if r.status_code != 202:
        raise RuntimeError(f"the runner answered {r.status_code} to a submission: {r.text[:500]}")
    return r.json()  # type: ignore[no-any-return]


def backend_started(event: str, data: dict[str, Any]) -> bool:
    """The backend's first progress event: the job's files are in its folder and its workers start."""
    return event == "progress" and data.get("state") == "running" and not str(data.get("message", "")).startswith(
        "running on slot")


def follow(client: httpx.Client, job_id: str, bound: float,
           stop: Callable[[str, dict[str, Any]], bool] | None = None) -> tuple[dict[str, Any] | None, str]:
    """Read the job's event stream up to its final ``status`` event (or the first event ``stop`` accepts):
    (that event's data, the raw stream read). Keep-alives arrive every 10 s, so a silent stream is a dead
    runner (the read timeout), not a slow job; ``bound`` is a safety net."""
    deadline = time.monotonic() + bound
    raw: list[str] = []
    event = ""
    with client.stream("GET", f"/v1/jobs/{job_id}/events", timeout=httpx.Timeout(60.0, connect=10.0)) as r:
        if r.status_code != 200:
            raise RuntimeError(f"the event stream answered {r.status_code}")
        for line in r.iter_lines():
            raw.append(line)
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                if event == "status" or (stop is not None and stop(event, data)):
                    return data, "\n".join(raw)
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} did not end within {bound:.0f} s")
    return None, "\n".join(raw)


# ------------------------------------------------------------------------------------ the corpus mode
class RunnerWorld:
    """The module's runner for the hostile corpus (see the module docstring)."""

    def __init__(self, base: Path) -> None:
        self.canary = make_canary()  # the runner's own token
        self.other = make_canary()  # a second client's token (the benign client of the liveness check)
        self.home, self.cwd, self.tmp, self.state = base / "home", base / "cwd", base / "tmp", base / "state"
        for d in (self.home / ".aws", self.cwd, self.tmp):
            d.mkdir(parents=True, exist_ok=True)
        (self.home / ".aws" / "credentials").write_text(f"[default]\naws_secret_access_key = {self.canary}\n")
        tokens = base / "tokens"
        tokens.write_text(f"# the benign client\n{self.other}\n")
        env = {k: v for k, v in os.environ.items() if k not in SECRET_VARS and not k.startswith("NKI_AGENT_BWRAP")}
        env.update({var: self.canary for var in SECRET_VARS})  # TOKEN_ENV among them: the runner's token
        env.update(HOME=str(self.home), TMPDIR=str(self.tmp))
        self.stderr = base / "runner.stderr"
        self.runner = RunnerProcess(self.state, self.stderr, env, ["--tokens-file", str(tokens), "--workers", "1"],
                                    cwd=self.cwd)

    def ensure(self) -> None:
        """The runner is up (started again if a kernel killed or froze it); its pid is a tool's, never a leftover."""
        TOOLS.discard(self.runner.pid)
        self.runner.ensure()
        TOOLS.add(self.runner.pid)

    @property
    def jobs_dir(self) -> Path:
        return self.state / "jobs"

    def scene(self, root: Path) -> Scene:
        s = Scene(root)
        s.extra_canaries += [self.canary, self.other]
        s.extra_snapshots = [self.home, self.cwd]
        s.extra_tmps = [self.tmp, self.jobs_dir]  # the sandbox's temp folders and the job folders: empty again
        return s
