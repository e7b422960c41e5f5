"""Fair scheduling across tokens: one FIFO per token, the next job by fewest running, then round robin.

A free slot takes the next job of a token that has one waiting and runs fewer than ``cap`` jobs
(0: no cap but the slots), choosing the token with the fewest running jobs and, among those, the
first in round-robin order after the token served last. A token alone uses every slot; a second
token's job goes to the next slot that frees (one slot-turn), whatever the first token queued.

``Fair`` holds no lock: the job manager calls it under its own condition variable.
"""

from __future__ import annotations

from collections import Counter, deque


class Fair:
    def __init__(self, cap: int = 0) -> None:
        self.cap = cap
        self._queues: dict[str, deque[str]] = {}  # owner -> queued job ids, oldest first
        self._ring: list[str] = []  # owners in the order they first queued a job (the round robin)
        self._last: str | None = None  # the owner served last: ties go to the next one in the ring
        self.running: Counter[str] = Counter()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, owner: str, job_id: str) -> None:
        if owner not in self._queues:
            self._queues[owner] = deque()
            self._ring.append(owner)
        self._queues[owner].append(job_id)
        self._size += 1

    def remove(self, owner: str, job_id: str) -> bool:
        """Take a queued job out (cancelled before it started); False when it is not queued."""
        q = self._queues.get(owner)
        if q is None or job_id not in q:
            return False
        q.remove(job_id)
        self._size -= 1
        return True

    def queued(self, owner: str) -> int:
        q = self._queues.get(owner)
        return len(q) if q else 0

    def pop(self) -> tuple[str, str] | None:
        """(owner, job id) of the job the next free slot runs (now counted as running), or None."""
        best: tuple[int, int, str] | None = None
        n = len(self._ring)
        start = self._ring.index(self._last) + 1 if self._last in self._queues else 0
        for k in range(n):
            owner = self._ring[(start + k) % n]
            if not self._queues[owner] or (self.cap and self.running[owner] >= self.cap):
                continue
            key = (self.running[owner], k, owner)
            if best is None or key < best:
                best = key
        if best is None:
            return None
        owner = best[2]
        job_id = self._queues[owner].popleft()
        self._size -= 1
        self.running[owner] += 1
        self._last = owner
        self._forget_idle()
        return owner, job_id

    def done(self, owner: str) -> None:
        """A job of ``owner`` that ``pop`` returned has ended."""
        self.running[owner] -= 1
        if self.running[owner] <= 0:
            del self.running[owner]
        self._forget_idle()

    def _forget_idle(self) -> None:
        """Tokens with nothing queued or running leave the ring (it stays as long as the active tokens)."""
        if len(self._ring) <= 64:
            return
        keep = [o for o in self._ring if self._queues[o] or self.running[o]]
        if len(keep) == len(self._ring):
            return
        for o in self._ring:
            if o not in keep:
                del self._queues[o]
        self._ring = keep
