"""The real language server whose toolchain answers hand-built results (the server's cost tests only).

``python tests/server/cost_fake_server.py`` runs ``nki_agent.server`` unchanged, except that
``toolchain.api.verify`` / ``simulate`` return a correct result at once (no sandbox, no simulation)
whose ``estimate`` is read from ``estimate.json`` next to the task (``null``: none), and that the remote
runner client is a stand-in reporting a *measured* latency (it opens no connection). So every run the
tests trigger goes through the server's real path: save → run pool → ``RunResult`` → lens, hover, hints.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from nki_agent.toolchain import api
from nki_agent.toolchain.protocol.jobs import Latency, ProfileResult, SeedFigures, SimulateResult, VerifyResult
from nki_agent.toolchain.protocol.cost import CostEstimate

MEASURED = Latency(kind="measured", source="nki.benchmark", p50_us=5210.0, p99_us=5300.0, iterations=50, core_id=0)


def _estimate(task: str) -> CostEstimate | None:
    with open(os.path.join(os.path.dirname(task), "estimate.json"), encoding="utf-8") as fh:
        raw = json.load(fh)
    return None if raw is None else CostEstimate.model_validate(raw)


def verify(kernel: str, task: str, **_: Any) -> VerifyResult:
    return VerifyResult(kernel=kernel, task=task, target="trn1", generation="classic", sandbox="bwrap",
                        compiled=True, correct=True, stage="correct",
                        seeds=[SeedFigures(seed=s, correct=True) for s in range(3)], estimate=_estimate(task))


def simulate(kernel: str, task: str, **_: Any) -> SimulateResult:
    return SimulateResult(kernel=kernel, task=task, target="trn1", generation="classic", sandbox="bwrap", ran=True,
                          kernel_name="matmul_kernel", estimate=_estimate(task))


class FakeRunner:
    """Stands in for ``runner.client.RemoteRunner``: a correct kernel, its latency measured on a device."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0) -> None:
        self.url = url

    def profile(self, kernel: str, task: str, **_: Any) -> ProfileResult:
        return ProfileResult(kernel=kernel, task=task, target="trn1", backend="neuron", sandbox="bwrap", runner=self.url,
                             compiled=True, correct=True, stage="latency",
                             seeds=[SeedFigures(seed=None, hidden=True, correct=True)], latency=MEASURED)

    def close(self) -> None:
        pass


def main() -> int:
    from nki_agent.runner import client
    from nki_agent.server.__main__ import main as serve

    api.verify = verify  # type: ignore[assignment]
    api.simulate = simulate  # type: ignore[assignment]
    client.RemoteRunner = FakeRunner  # type: ignore[assignment, misc]
    return serve([])


if __name__ == "__main__":
    code = main()
    try:
        sys.stdout.flush()
    except (ValueError, OSError):  # the client side is already closed
        pass
    os._exit(code)
