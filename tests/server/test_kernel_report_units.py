"""``handlers/kernel_report.report`` on constructed runs: the timeline of the newest estimate that has
one, measured vs estimated latency kept apart, non-finite figures as None, hostile strings left to the
renderer (the SVG escapes them)."""

from __future__ import annotations

import json
import math

from nki_agent.server.analysis import RunResult
from nki_agent.server.handlers.kernel_report import report
from nki_agent.toolchain.protocol.jobs import Latency, ProfileResult, SeedFigures, SimulateResult, VerifyResult
from nki_agent.toolchain.protocol.cost import CostEstimate, TimelineBar

HOSTILE = '<script>alert("x")</script>&'


def estimate(timeline: bool) -> CostEstimate:
    bars = [TimelineBar(lane="TensorE", start_us=0.0, end_us=2.0, api=HOSTILE, line=3, critical=True)] if timeline else []
    return CostEstimate(target="trn1", latency_us=5.0, overhead_us=1.0, bound="TensorE", timeline=bars)


def run(kind: str, revision: int, result: VerifyResult | SimulateResult) -> RunResult:
    return RunResult(kind, revision, revision, (), result, "task.py")


def test_newest_timeline_latencies_and_non_finite_figures():
    history = [
        run("simulate", 1, SimulateResult(ran=True, target="trn1", estimate=estimate(True))),
        run("verify", 2, VerifyResult(compiled=True, correct=False, target="trn1", max_abs_error=math.inf,
                                      mismatches=3, estimate=estimate(False),
                                      seeds=[SeedFigures(seed=0, correct=False, mismatches=3, elements=8)])),
        run("remote", 3, ProfileResult(compiled=True, correct=True, target="trn1", runner="http://h:1",
                                       latency=Latency(kind="measured", source="nki.benchmark", p50_us=7.5,
                                                       p99_us=8.0, iterations=10))),
    ]
    rep = report("file:///k.py", "/k.py", 3, "task.py", history)
    remote, verify, simulate = rep.runs
    assert [r.kind for r in rep.runs] == ["remote", "verify", "simulate"]
    assert remote.measured is not None and remote.measured.microseconds == 7.5 and remote.estimated is None
    assert verify.estimated is not None and verify.estimated.source == "cost model" and verify.measured is None
    assert verify.verdict == "incorrect" and verify.max_abs_error is None and verify.seeds[0].mismatches == 3
    assert simulate.verdict == "simulated" and simulate.correct is None
    assert rep.mismatch_of == 1
    assert rep.timeline_of == 1 and "version 1 (simulate)" in rep.timeline_svg and "estimated by the cost model" in rep.timeline_svg
    assert "<script>" not in rep.timeline_svg and "&lt;script&gt;" in rep.timeline_svg
    json.dumps(rep.to_json(), allow_nan=False)  # valid JSON: no inf / NaN


def test_a_timeline_the_report_computed_is_used_when_newer_than_every_run():
    history = [run("simulate", 1, SimulateResult(ran=True, target="trn1", estimate=estimate(True)))]
    assert report("u", "/k.py", 9, "", history, (5, 9, "<svg>computed</svg>")).timeline_svg == "<svg>computed</svg>"
    older = report("u", "/k.py", 9, "", history, (0, 0, "<svg>stale-one</svg>"))
    assert older.timeline_of == 1 and "stale-one" not in older.timeline_svg
    assert report("u", "/k.py", 2, "", [], None).timeline_svg == ""
