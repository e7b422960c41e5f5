"""``nki-agent runner serve``: the remote runner service (simulator or neuron backend) on this machine."""

from __future__ import annotations

import os

import typer

from .render import console

app = typer.Typer(help="The remote runner: verify and time kernels for editors and agents over HTTP.",
                  no_args_is_help=True)


@app.command("serve")
def serve(
    backend: str = typer.Option("simulator", "--backend", help="neuron (the Neuron SDK on this Trainium host) "
                                "or simulator (the embedded toolchain)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (non-loopback needs a token)."),
    port: int = typer.Option(8765, "--port", help="Port (0: any free port; see --port-file)."),
    token: str | None = typer.Option(None, "--token", help="Bearer token clients must present "
                                        "(default: env NKI_AGENT_RUNNER_TOKEN)."),
    tokens_file: str | None = typer.Option(None, "--tokens-file", help="More tokens, one per line (each "
                                              "its own client: jobs, quota and rate limit)."),
    workers: int = typer.Option(1, "--workers", min=1, help="Concurrent jobs (neuron: at most one per NeuronCore)."),
    queue_size: int = typer.Option(256, "--queue-size", min=1, help="Accepted jobs that may wait (more: 503)."),
    queue_per_token: int = typer.Option(0, "--queue-per-token", min=0, help="Unfinished jobs one token may "
                                        "have (0: a quarter of the queue, at least 8)."),
    running_per_token: int = typer.Option(0, "--running-per-token", min=0, help="Jobs one token may run at "
                                          "once (0: every slot; free slots go round robin to waiting tokens)."),
    max_timeout: float = typer.Option(300.0, "--max-timeout", min=1.0, max=900.0, help="Cap on every job's "
                                      "timeout_s in seconds: the longest one token's job holds a slot."),
    rate: int = typer.Option(600, "--rate", min=1, help="Submissions per token per minute (more: 429)."),
    state_dir: str | None = typer.Option(None, "--state-dir", help="Folder of the job database and job "
                                            "files (default: a new private temp folder)."),
    cluster: str | None = typer.Option(None, "--cluster", help="Run jobs as Ray tasks: ray://HOST:PORT, or "
                                          "'local' for a Ray instance started here."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not answer repeated jobs from the result cache."),
    unsafe_no_sandbox: bool = typer.Option(False, "--unsafe-no-sandbox", help="Run untrusted jobs even where "
                                           "the OS sandbox is unavailable (never on a shared host)."),
    port_file: str | None = typer.Option(None, "--port-file", help="Write the bound port to this file."),
    log_level: str = typer.Option("warning", "--log-level", help="uvicorn log level."),
) -> None:
    """Serve the runner's HTTP API (GET /healthz, /v1/capabilities, POST /v1/jobs, ...; Kernel Forge's /reward)."""
    from ..runner.config import TOKEN_ENV, ConfigError, RunnerConfig
    from ..runner.service import serve as run

    config = RunnerConfig(backend=backend, host=host, port=port, token=token or os.environ.get(TOKEN_ENV),
                          tokens_file=tokens_file, workers=workers, queue_size=queue_size,
                          queue_per_token=queue_per_token, running_per_token=running_per_token,
                          max_timeout_s=max_timeout, rate_per_minute=rate, state_dir=state_dir or "",
                          unsafe_no_sandbox=unsafe_no_sandbox, cluster=cluster, cache=not no_cache)
    try:
        config.validate()
    except ConfigError as e:
        console.print(f"error: {e}", markup=False)
        raise typer.Exit(2) from None
    run(config, port_file=port_file, log_level=log_level)
