"""``api.estimate``: the cost model's estimate (and its timeline) from a trace-only launch in this machine's
jail — never the installed runner — and the simulate request's ``estimate`` / ``timeline`` /
``arithmetic`` flags (JSON booleans or a malformed request). A jailed verification keeps the kernel
role's estimate (``judge.py``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from nki_agent.toolchain import api
from nki_agent.toolchain.isolation import runner, sandbox

ROOT = Path(__file__).resolve().parents[2]
KERNEL = str(ROOT / "examples" / "l2_matmul" / "kernel_classic.py")
TASK = str(ROOT / "examples" / "l2_matmul" / "task.py")
HAVE_COST = importlib.util.find_spec("nki_agent.toolchain.cost.model") is not None


class Refusing:
    """An installed runner that must not be asked."""

    name = "refusing"

    def __getattr__(self, op: str) -> Any:
        def refuse(*a: Any, **kw: Any) -> Any:
            raise AssertionError(f"api.estimate asked the installed runner ({op})")
        return refuse


def test_estimate_runs_in_the_local_jail_not_on_the_installed_runner() -> None:
    previous = runner.use(Refusing())  # type: ignore[arg-type]
    try:
        res = api.estimate(KERNEL, TASK, target="trn2", timeline=True)
    finally:
        runner.use(previous)
    assert res.ran and res.sandbox in ("bwrap", "unsandboxed") and res.target == "trn2"
    if HAVE_COST and res.estimate is not None:
        assert res.estimate.target == "trn2" and res.estimate.latency_us > 0 and res.estimate.timeline


def test_plain_simulate_has_no_timeline() -> None:
    res = api.simulate(KERNEL, TASK, target="trn1")
    assert res.ran and (res.estimate is None or res.estimate.timeline == [])


@pytest.mark.parametrize("field", ["estimate", "timeline", "arithmetic"])
def test_a_flag_that_is_not_a_boolean_is_a_malformed_request(field: str) -> None:
    req = {"op": "simulate", "kernel": KERNEL, "task": TASK, field: "yes"}
    reply = sandbox.run(req, timeout=60)
    assert reply.get("ok") is False and reply.get("code") == "sim_worker_crash"
    assert f"{field!r} must be a boolean" in str(reply.get("error"))


@pytest.mark.skipif(not HAVE_COST, reason="the cost model (toolchain/cost) is not installed")
def test_a_jailed_profile_carries_the_kernel_roles_estimate() -> None:
    res = api.profile(KERNEL, TASK, seeds=1, target="trn1")
    assert res.correct, res.problems
    assert res.estimate is not None and res.estimate.target == "trn1"
    assert res.latency.kind == "estimated" and res.latency.p50_us == res.estimate.latency_us
