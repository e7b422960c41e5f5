"""The runner's settings (``nki-agent runner serve`` options), validated once at start-up.

The service refuses to start listening on a non-loopback address without a token, and refuses
untrusted jobs when the OS jail does not work here unless started with ``unsafe_no_sandbox``. The
fairness settings bound what one token can do to another: ``queue_per_token`` (its unfinished jobs),
``running_per_token`` (its running jobs) and ``max_timeout_s`` (every job's timeout, so the longest
slot-turn another token's job waits for).
"""

from __future__ import annotations

import ipaddress
import os
import tempfile
from dataclasses import dataclass

TOKEN_ENV = "NKI_AGENT_RUNNER_TOKEN"
LOOPBACK_NAMES = ("localhost",)
MAX_BODY_BYTES = 4 * 1024 * 1024  # Kernel Forge's body cap; a batch of 64 kernels fits
MAX_TIMEOUT_S = 900.0  # JobRequest.timeout_s's own bound


class ConfigError(ValueError):
    """A setting that makes the runner unsafe or impossible to start (the message says which)."""


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class RunnerConfig:
    backend: str = "simulator"  # simulator | neuron
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    tokens_file: str | None = None  # more tokens, one per line: one identity (quota, rate limit, jobs) each
    workers: int = 1  # concurrent jobs (the neuron backend: at most one per NeuronCore)
    queue_size: int = 256  # accepted jobs waiting for a slot; more → 503
    queue_per_token: int = 0  # unfinished jobs one token may have (0: a quarter of the queue, at least 8)
    running_per_token: int = 0  # jobs one token may run at once (0: every slot; the scheduler is fair anyway)
    max_timeout_s: float = 300.0  # every job's timeout_s is capped here: the longest a slot-turn lasts
    rate_per_minute: int = 600  # submissions per token per minute; more → 429
    max_body_bytes: int = MAX_BODY_BYTES
    state_dir: str = ""  # the SQLite database and job folders; default: a private temp folder
    unsafe_no_sandbox: bool = False
    cluster: str | None = None  # ray://host:port, or "local" for a Ray cluster started here
    cache: bool = True

    def validate(self) -> RunnerConfig:
        if self.backend not in ("simulator", "neuron"):
            raise ConfigError(f"unknown backend {self.backend!r} (simulator | neuron)")
        if self.token is not None and not self.token.strip():
            self.token = None
        for t in self.tokens:
            if len(t) < 16:
                raise ConfigError("a token is shorter than 16 characters")
        if not self.tokens and not is_loopback(self.host):
            raise ConfigError(f"refusing to listen on {self.host} without a token: pass --token or set {TOKEN_ENV} "
                              "(only a loopback address may run unauthenticated)")
        if self.workers < 1 or self.queue_size < 1 or self.rate_per_minute < 1:
            raise ConfigError("workers, queue size and rate limit must be positive")
        if self.running_per_token < 0 or self.queue_per_token < 0:
            raise ConfigError("the per-token caps must be 0 (default) or positive")
        if not 1.0 <= self.max_timeout_s <= MAX_TIMEOUT_S:
            raise ConfigError(f"max_timeout_s must be between 1 and {MAX_TIMEOUT_S:g} seconds")
        if not self.state_dir:
            self.state_dir = tempfile.mkdtemp(prefix="nki-agent-runner-")
        os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
        os.chmod(self.state_dir, 0o700)
        return self

    @property
    def tokens(self) -> tuple[str, ...]:
        out = [self.token] if self.token else []
        if self.tokens_file:
            try:
                with open(self.tokens_file, encoding="utf-8") as fh:
                    out += [ln.strip() for ln in fh if ln.strip() and not ln.lstrip().startswith("#")]
            except OSError as e:
                raise ConfigError(f"cannot read the tokens file: {e.strerror}") from None
        return tuple(out)

    @property
    def db_path(self) -> str:
        return os.path.join(self.state_dir, "runner.sqlite3")

    @property
    def jobs_dir(self) -> str:
        return os.path.join(self.state_dir, "jobs")
