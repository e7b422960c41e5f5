"""The runner's durable state in SQLite: every accepted job (request, state, result) and the result cache.

A job is written before its id is returned, so a restart loses no accepted job: on start-up, jobs
that were queued are queued again and jobs that were running are marked failed ("the runner
restarted during the job"). Results stay fetchable by id after the client's connection drops. The
cache maps a hash of kernel + task + modules + op settings + backend + SDK version + target to a
result, so re-verifying unchanged code answers at once. Owners are token hashes, never tokens.
"""

from __future__ import annotations

import sqlite3
import threading
import time

from pydantic import TypeAdapter

from nki_agent.toolchain.protocol.jobs import JobRequest, JobResult, JobStatus
from .layout import BundledJobRequest

_RESULT: TypeAdapter[JobResult] = TypeAdapter(JobResult)  # type: ignore[arg-type]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, op TEXT NOT NULL, state TEXT NOT NULL, nonce TEXT,
    request TEXT NOT NULL, result TEXT, error TEXT, cached INTEGER NOT NULL DEFAULT 0, core_id INTEGER,
    submitted_at REAL NOT NULL, started_at REAL, finished_at REAL, seq INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state, seq);
CREATE INDEX IF NOT EXISTS jobs_nonce ON jobs(owner, nonce);
CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, result TEXT NOT NULL, stored_at REAL NOT NULL);
"""


class Store:
    def __init__(self, path: str) -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()
        row = self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM jobs").fetchone()
        self._seq = int(row[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------------ jobs

    def add(self, job_id: str, owner: str, request: JobRequest, state: str, submitted_at: float) -> None:
        with self._lock:
            self._seq += 1
            self._db.execute("INSERT INTO jobs (id, owner, op, state, nonce, request, submitted_at, seq) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                             (job_id, owner, request.op, state, request.nonce, request.model_dump_json(),
                              submitted_at, self._seq))

    def started(self, job_id: str, core_id: int | None) -> None:
        with self._lock:
            self._db.execute("UPDATE jobs SET state='running', started_at=?, core_id=? WHERE id=?",
                             (time.time(), core_id, job_id))

    def finish(self, job_id: str, state: str, result: JobResult | None, error: str | None,
               cached: bool = False) -> None:
        text = result.model_dump_json() if result is not None else None
        with self._lock:
            self._db.execute("UPDATE jobs SET state=?, result=?, error=?, cached=?, finished_at=? WHERE id=?",
                             (state, text, error, int(cached), time.time(), job_id))

    def status(self, job_id: str) -> tuple[str, JobStatus] | None:
        """(owner, status) of a job, or None."""
        with self._lock:
            row = self._db.execute("SELECT owner, id, op, state, nonce, submitted_at, started_at, finished_at, "
                                   "result, error, cached, core_id FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            return None
        owner, jid, op, state, nonce, sub, st, fin, result, error, cached, core = row
        res = _RESULT.validate_json(result) if result else None
        return owner, JobStatus(id=jid, op=op, state=state, nonce=nonce, submitted_at=sub, started_at=st,
                                finished_at=fin, result=res, error=error, cached=bool(cached), core_id=core)

    def request(self, job_id: str) -> JobRequest | None:
        with self._lock:
            row = self._db.execute("SELECT request FROM jobs WHERE id=?", (job_id,)).fetchone()
        return BundledJobRequest.model_validate_json(row[0]) if row else None

    def recover(self) -> list[tuple[str, str]]:
        """After a restart: fail what was running, return (id, owner) of what was queued, oldest first."""
        with self._lock:
            self._db.execute("UPDATE jobs SET state='failed', error=?, finished_at=? WHERE state='running'",
                             ("the runner restarted during the job; submit it again", time.time()))
            rows = self._db.execute("SELECT id, owner FROM jobs WHERE state='queued' ORDER BY seq").fetchall()
        return [(r[0], r[1]) for r in rows]

    def by_nonce(self, owner: str, nonce: str, limit: int = 20) -> list[str]:
        with self._lock:
            rows = self._db.execute("SELECT id FROM jobs WHERE owner=? AND nonce=? ORDER BY seq DESC LIMIT ?",
                                    (owner, nonce, limit)).fetchall()
        return [r[0] for r in rows]

    def count(self, state: str) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM jobs WHERE state=?", (state,)).fetchone()[0])

    # ------------------------------------------------------------------ cache

    def cached(self, key: str) -> JobResult | None:
        with self._lock:
            row = self._db.execute("SELECT result FROM cache WHERE key=?", (key,)).fetchone()
        return _RESULT.validate_json(row[0]) if row else None

    def remember(self, key: str, result: JobResult) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO cache (key, result, stored_at) VALUES (?, ?, ?)",
                             (key, result.model_dump_json(), time.time()))
