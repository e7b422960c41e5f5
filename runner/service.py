"""Assembles a runner from its settings (store, backend, executor, job manager, app) and serves it.

``build`` is what tests use in-process; ``serve`` binds the socket first (so ``--port 0`` works and
the bound address is printed, and written to ``--port-file`` when asked), then runs uvicorn on it.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass

from fastapi import FastAPI

from nki_agent.toolchain.isolation import jail
from . import auth
from .app import Context, create_app
from .backends import Backend
from .config import RunnerConfig
from .jobs import Executor, JobManager
from .store import Store


def make_backend(name: str) -> Backend:
    if name == "neuron":
        from .backends.neuron import NeuronBackend

        return NeuronBackend()
    from .backends.simulator import SimulatorBackend

    return SimulatorBackend()


def refusal(config: RunnerConfig) -> str | None:
    """Why untrusted jobs are refused now, or None."""
    if config.unsafe_no_sandbox:
        return None
    st = jail.status()
    if st.available:
        return None
    return ("the OS sandbox is unavailable on this host (" + (st.reason or "bubblewrap does not start") +
            "); this runner refuses untrusted jobs unless started with --unsafe-no-sandbox")


@dataclass
class Runner:
    config: RunnerConfig
    store: Store
    manager: JobManager
    app: FastAPI

    def close(self) -> None:
        self.manager.close()
        close = getattr(self.manager.executor, "close", None)
        if callable(close):
            close()
        self.store.close()


def build(config: RunnerConfig, backend: Backend | None = None, executor: Executor | None = None) -> Runner:
    config.validate()
    backend = backend or make_backend(config.backend)
    cluster_name = None
    if executor is None and config.cluster:
        from .cluster import RayExecutor

        executor = RayExecutor(config.cluster, backend)
        cluster_name = config.cluster
    store = Store(config.db_path)
    manager = JobManager(backend, store, config.jobs_dir, workers=config.workers, queue_size=config.queue_size,
                         executor=executor, use_cache=config.cache, accept=lambda: refusal(config),
                         per_owner=config.queue_per_token, running_per_token=config.running_per_token,
                         max_timeout_s=config.max_timeout_s)
    ctx = Context(config, manager, auth.RateLimiter(config.rate_per_minute), cluster_name)
    app = create_app(ctx)
    manager.start()
    return Runner(config, store, manager, app)


def serve(config: RunnerConfig, port_file: str | None = None, log_level: str = "warning") -> None:
    import uvicorn

    runner = build(config)
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((config.host, config.port))
    sock.listen(512)
    host, port = sock.getsockname()[:2]
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    if port_file:
        tmp = port_file + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(f"{port}\n")
        os.replace(tmp, port_file)
    print(f"nki-agent runner ({runner.manager.backend.name} backend, {len(runner.manager.slots)} slot(s), "
          f"sandbox {jail.status().label}) listening on {url}", flush=True)
    if refusal(config):
        print(f"warning: {refusal(config)}", file=sys.stderr, flush=True)
    info = runner.manager.backend.info()
    if info.name == "neuron" and not info.neuron_cores:
        print("warning: the neuron backend found no NeuronCore on this host (neuron-ls, /dev/neuron*): device jobs "
              "will fail with runner_device_unavailable; use --backend simulator without Trainium", file=sys.stderr,
              flush=True)
    server = uvicorn.Server(uvicorn.Config(runner.app, log_level=log_level, access_log=False,
                                           timeout_graceful_shutdown=5))
    try:
        server.run(sockets=[sock])
    finally:
        runner.close()
