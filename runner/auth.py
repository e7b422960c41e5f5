"""Who is calling: bearer tokens (compared in constant time, never logged) and per-token rate limits.

A caller is known inside the runner only by an owner id derived from its token (a hash prefix), so
jobs, logs and the database never hold a token. Without a configured token (loopback only) every
caller is ``anonymous``.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


def owner_of(token: str | None) -> str:
    if not token:
        return "anonymous"
    return "t-" + hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def check(configured: tuple[str, ...], presented: str | None) -> bool:
    """True when no token is configured, or the presented one equals one of them (each compared in
    constant time, all of them always compared)."""
    if not configured:
        return True
    if presented is None:
        return False
    given = presented.encode("utf-8", "surrogatepass")
    ok = False
    for t in configured:
        ok |= hmac.compare_digest(t.encode("utf-8", "surrogatepass"), given)
    return ok


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class RateLimiter:
    """A token bucket per owner: ``per_minute`` submissions, bursts up to the same number."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def take(self, owner: str, n: int = 1) -> float:
        """0 when ``n`` submissions are allowed now (and counted), else the seconds to wait."""
        now = self._clock()
        with self._lock:
            b = self._buckets.get(owner)
            if b is None:
                b = self._buckets[owner] = _Bucket(self.capacity, now)
            b.tokens = min(self.capacity, b.tokens + (now - b.stamp) * self.rate)
            b.stamp = now
            if b.tokens >= n:
                b.tokens -= n
                return 0.0
            return max(1.0, math.ceil((n - b.tokens) / self.rate))
