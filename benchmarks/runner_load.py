"""Runner load: N concurrent submissions to the simulator backend, with 1 vs 2 workers.

For each worker count (``--workers 1,2``) it starts ``nki-agent runner serve`` as a subprocess on
127.0.0.1 (simulator backend, its own state folder, ``--no-cache`` so every job really runs, queue,
per-token cap and rate limit raised above N; ready when it prints its "listening on" line), then fires
N submissions at once — N threads, one connection each, released together — of
``examples/l1_add/kernel_new.py`` verified against its task (``--seeds`` visible seeds plus the
backend's hidden one). Every kernel text carries its own nonce in a comment, and the request the same
nonce, so no two jobs share anything. Every job is then collected through the job API (its event
stream up to the final status, ``--streams`` streams at a time, then ``GET /v1/jobs/{id}``) and checked:
every submission accepted (202) with a distinct id, the runner's database holds exactly N jobs with
N distinct nonces (none lost, none duplicated), every job ``done`` and correct, and each job's status
echoes its own nonce. Any failed check makes the exit status 1.

Figures, all from the runner's clock (``JobStatus.submitted_at`` / ``started_at`` / ``finished_at``)
and the backend's own measure (``result.seconds``: the simulator backend's verification — both jailed
workers started, run and judged), p50 / p99 over the N jobs:

- throughput = N / (last ``finished_at`` - first ``submitted_at``), jobs per second;
- service overhead = (``finished_at`` - ``started_at``) - ``result.seconds``: how long a job held its slot
  beyond the backend's own work — the job's folder and files, the store writes, progress events, the
  result's models and JSON — i.e. what the runner adds to each job;
- queue wait = ``started_at`` - ``submitted_at`` (grows with N / workers: reported, not overhead);
- latency = ``finished_at`` - ``submitted_at`` (queue wait + slot time);
- backend = ``result.seconds``; submit = the client's time for ``POST /v1/jobs`` to answer 202.

    .venv/bin/python benchmarks/runner_load.py [--jobs 200] [--workers 1,2] [--seeds 1] [--streams 8]
                                               [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import re
import secrets
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
KERNEL = ROOT / "examples" / "l1_add" / "kernel_new.py"
TASK = ROOT / "examples" / "l1_add" / "task.py"
START_BOUND = 180.0  # seconds for the runner to print its "listening on" line
JOB_BOUND = 1800.0  # safety net for one job's event stream (queued behind N - 1 others)


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


# ------------------------------------------------------------------------------------------ the runner
class Runner:
    """``nki-agent runner serve`` in its own session on 127.0.0.1, its token in its environment."""

    def __init__(self, workers: int, jobs: int, state: Path, token: str) -> None:
        self.state, self.token = state, token
        from nki_agent.toolchain.isolation import jail

        self.sandbox = jail.status().label
        argv = [sys.executable, "-m", "nki_agent", "runner", "serve", "--host", "127.0.0.1", "--port", "0",
                "--state-dir", str(state), "--workers", str(workers), "--no-cache",
                "--queue-size", str(max(256, jobs)), "--queue-per-token", str(jobs), "--rate", str(max(600, 10 * jobs))]
        if not jail.status().available:
            argv.append("--unsafe-no-sandbox")  # trusted example kernels; the table says "unsandboxed"
        env = dict(os.environ, NKI_AGENT_RUNNER_TOKEN=token, PYTHONUNBUFFERED="1")
        self.log = state.with_suffix(".stderr")
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, env=env,
                                         cwd=str(ROOT), start_new_session=True)
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(lines,), daemon=True).start()
        self.url = ""
        while not self.url:
            try:
                line = lines.get(timeout=START_BOUND)
            except queue.Empty:
                line = None
            if line is None:
                self.stop()
                raise RuntimeError(f"the runner did not start:\n{self.log.read_text(errors='replace')[-3000:]}")
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            self.url = found.group(1) if found else ""

    def _read(self, lines: queue.Queue[str | None]) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            lines.put(raw.decode("utf-8", "replace"))
        lines.put(None)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, trust_env=False,
                            timeout=httpx.Timeout(120.0, connect=30.0))

    def stored(self) -> tuple[int, int]:
        """(jobs, distinct nonces) in the runner's database."""
        db = sqlite3.connect(f"file:{self.state / 'runner.sqlite3'}?mode=ro", uri=True, timeout=30)
        try:
            row = db.execute("SELECT COUNT(*), COUNT(DISTINCT nonce) FROM jobs").fetchone()
        finally:
            db.close()
        return int(row[0]), int(row[1])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(60)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


# ---------------------------------------------------------------------------------------------- jobs
def body(nonce: str, seeds: int) -> dict[str, Any]:
    text = KERNEL.read_text() + f"\n# load nonce: {nonce}\n"
    return {"op": "verify", "kernel": {"name": "kernel.py", "text": text},
            "task": {"name": "task.py", "text": TASK.read_text()}, "seeds": seeds, "timeout_s": 600, "nonce": nonce}


def submit_all(runner: Runner, nonces: list[str], seeds: int) -> tuple[dict[str, str], list[str], list[float]]:
    """Every submission at once: nonce -> job id, the failures, and each POST's seconds."""
    ids: dict[str, str] = {}
    failures: list[str] = []
    seconds: list[float] = []
    lock = threading.Lock()
    go = threading.Event()

    def one(nonce: str) -> None:
        payload = body(nonce, seeds)
        with runner.client() as c:
            go.wait()
            t0 = time.perf_counter()
            try:
                r = c.post("/v1/jobs", json=payload)
            except httpx.HTTPError as e:
                with lock:
                    failures.append(f"{nonce}: {type(e).__name__}: {e}")
                return
            took = time.perf_counter() - t0
        with lock:
            seconds.append(took)
            if r.status_code != 202:
                failures.append(f"{nonce}: HTTP {r.status_code} {r.text[:200]}")
            elif nonce in ids:
                failures.append(f"{nonce}: submitted twice")
            else:
                ids[nonce] = r.json()["id"]

    threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in nonces]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join()
    return ids, failures, seconds


def collect(runner: Runner, ids: dict[str, str], streams: int) -> dict[str, dict[str, Any]]:
    """Each job's final status (its event stream to the end, then ``GET /v1/jobs/{id}``), by nonce."""
    todo: queue.Queue[tuple[str, str]] = queue.Queue()
    for item in ids.items():
        todo.put(item)
    out: dict[str, dict[str, Any]] = {}
    lock = threading.Lock()

    def worker() -> None:
        with runner.client() as c:
            while True:
                try:
                    nonce, job_id = todo.get_nowait()
                except queue.Empty:
                    return
                deadline = time.monotonic() + JOB_BOUND
                with c.stream("GET", f"/v1/jobs/{job_id}/events", timeout=httpx.Timeout(60.0, connect=30.0)) as r:
                    for line in r.iter_lines():
                        if line.startswith("event: status") or time.monotonic() > deadline:
                            break
                status = c.get(f"/v1/jobs/{job_id}").json()
                with lock:
                    out[nonce] = status

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, streams))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def run(workers: int, jobs: int, seeds: int, streams: int, base: Path) -> dict[str, Any]:
    token = "load-" + secrets.token_hex(16)
    runner = Runner(workers, jobs, base / f"state-{workers}", token)
    try:
        nonces = [f"load-{workers}-{i:04d}-{secrets.token_hex(4)}" for i in range(jobs)]
        ids, failures, submit_s = submit_all(runner, nonces, seeds)
        statuses = collect(runner, ids, streams)
        stored, distinct = runner.stored()
    finally:
        runner.stop()
    problems = list(failures)
    if len(set(ids.values())) != len(ids):
        problems.append("two submissions got the same job id")
    lost = [n for n in nonces if n not in statuses]
    problems += [f"{n}: never collected" for n in lost]
    if stored != jobs or distinct != jobs:
        problems.append(f"the runner's database holds {stored} jobs with {distinct} distinct nonces (expected {jobs})")
    overhead, backend, wait, latency, slot = [], [], [], [], []
    for nonce, st in statuses.items():
        res = st.get("result") or {}
        if st.get("id") != ids[nonce] or st.get("nonce") != nonce:
            problems.append(f"{nonce}: the status of job {st.get('id')} echoes nonce {st.get('nonce')!r}")
        if st.get("state") != "done" or not res.get("correct"):
            problems.append(f"{nonce}: {st.get('state')} {st.get('error') or [p.get('code') for p in res.get('problems', [])]}")
            continue
        held = st["finished_at"] - st["started_at"]
        slot.append(held)
        backend.append(float(res["seconds"]))
        overhead.append(held - float(res["seconds"]))
        wait.append(st["started_at"] - st["submitted_at"])
        latency.append(st["finished_at"] - st["submitted_at"])
    done = [s for s in statuses.values() if s.get("state") == "done"]
    span = (max(s["finished_at"] for s in done) - min(s["submitted_at"] for s in done)) if done else math.nan
    return {
        "workers": workers, "jobs": jobs, "seeds": seeds, "sandbox": runner.sandbox,
        "accepted": len(ids), "collected": len(statuses), "done_correct": len(overhead),
        "lost": len(lost), "stored": stored, "distinct_nonces": distinct,
        "span_s": round(span, 3), "throughput_jobs_s": round(len(done) / span, 3) if done and span > 0 else None,
        "overhead_p50_ms": round(1000 * pct(overhead, 0.5), 2), "overhead_p99_ms": round(1000 * pct(overhead, 0.99), 2),
        "overhead_mean_ms": round(1000 * statistics.fmean(overhead), 2) if overhead else None,
        "backend_p50_s": round(pct(backend, 0.5), 3), "backend_p99_s": round(pct(backend, 0.99), 3),
        "queue_wait_p50_s": round(pct(wait, 0.5), 3), "queue_wait_p99_s": round(pct(wait, 0.99), 3),
        "latency_p50_s": round(pct(latency, 0.5), 3), "latency_p99_s": round(pct(latency, 0.99), 3),
        "submit_p50_ms": round(1000 * pct(submit_s, 0.5), 2), "submit_p99_ms": round(1000 * pct(submit_s, 0.99), 2),
        "problems": problems[:50], "ok": not problems,
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'workers':>7} {'jobs':>5} {'ok':>4} {'lost':>4} {'jobs/s':>7} {'overhead p50':>13} {'p99':>9} "
            f"{'backend p50':>12} {'queue p50':>10} {'latency p50':>12} {'p99':>8} {'submit p99':>11}")
    out = [head]
    for r in rows:
        out.append(f"{r['workers']:>7} {r['jobs']:>5} {r['done_correct']:>4} {r['lost']:>4} "
                   f"{r['throughput_jobs_s'] or float('nan'):>7.2f} {r['overhead_p50_ms']:>10.1f} ms "
                   f"{r['overhead_p99_ms']:>6.1f} ms {r['backend_p50_s']:>10.3f} s {r['queue_wait_p50_s']:>8.2f} s "
                   f"{r['latency_p50_s']:>10.2f} s {r['latency_p99_s']:>6.2f} s {r['submit_p99_ms']:>8.1f} ms")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=200, help="concurrent submissions per worker count (default 200)")
    ap.add_argument("--workers", default="1,2", help="worker counts to compare, comma-separated (default 1,2)")
    ap.add_argument("--seeds", type=int, default=1, help="visible seeds per verification (default 1; +1 hidden)")
    ap.add_argument("--streams", type=int, default=8, help="event streams followed at a time (default 8)")
    ap.add_argument("--json", default="", help="write every figure to this file")
    args = ap.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",") if w.strip()]
    base = Path(tempfile.mkdtemp(prefix="nki-runner-load-"))
    rows = []
    try:
        for w in counts:
            print(f"{args.jobs} concurrent verify jobs (l1_add, {args.seeds} seed(s) + 1 hidden), "
                  f"--workers {w} ...", flush=True)
            rows.append(run(w, args.jobs, args.seeds, args.streams, base))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"machine: {os.cpu_count()} CPUs; sandbox {rows[0]['sandbox'] if rows else '?'}; overhead = slot time - "
          "result.seconds")
    print(table(rows))
    for r in rows:
        for p in r["problems"]:
            print(f"  workers {r['workers']}: {p}")
    if len(rows) >= 2 and rows[0]["throughput_jobs_s"] and rows[-1]["throughput_jobs_s"]:
        print(f"throughput {rows[-1]['workers']} vs {rows[0]['workers']} workers: "
              f"{rows[-1]['throughput_jobs_s'] / rows[0]['throughput_jobs_s']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"jobs": args.jobs, "seeds": args.seeds, "cpus": os.cpu_count(),
                                               "runs": rows}, indent=2))
    return 0 if rows and all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
