"""The estimated engine timeline as SVG (``nki_agent/cli/timeline_svg.py``): well-formed XML, one labelled lane
per engine and DMA queue, critical bars marked, a time axis, "estimated" in the title, no external
resources, every kernel-controlled string escaped, and bounded output for thousands of bars."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

from cost_fixtures import HOSTILE_API, estimate
from nki_agent.toolchain.protocol.cost import TimelineBar

from nki_agent.cli import timeline_svg

NS = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg.encode("utf-8"))
    assert root.tag == f"{NS}svg"
    return root


def texts(root: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in root.iter(f"{NS}text")]


def bars(root: ET.Element) -> list[ET.Element]:
    return [r for r in root.iter(f"{NS}rect") if "bar" in (r.get("class") or "").split()]


def test_lanes_in_hardware_order_with_labels_bars_and_critical_marks() -> None:
    root = parse(timeline_svg.render(estimate(bars=60), subtitle="examples/l2_matmul/kernel_classic.py"))
    lanes = [g.get("data-lane") for g in root.iter(f"{NS}g") if g.get("class") == "lane"]
    assert lanes == ["TensorE", "VectorE", "ScalarE", "GpSimd", "DMA q0", "DMA q1"]
    labels = texts(root)
    for lane in lanes:
        assert lane in labels
    drawn = bars(root)
    critical = [r for r in drawn if "critical" in (r.get("class") or "")]
    assert critical and len(critical) < len(drawn)
    assert all(r.get("stroke") for r in critical) and not any(r.get("stroke") for r in drawn if r not in critical)
    assert len({r.get("fill") for r in drawn if r not in critical}) >= 4  # one colour per engine
    tips = ["".join(t.itertext()) for r in drawn for t in r.iter(f"{NS}title")]
    assert any("nisa.nc_matmul" in t and "line 1" in t and "critical path" in t for t in tips)


def test_title_says_estimated_and_axis_is_in_ms_or_us() -> None:
    root = parse(timeline_svg.render(estimate(latency_us=6970.0)))
    title = "".join(next(root.iter(f"{NS}title")).itertext())
    assert "≈ 6.97 ms est. trn1, TensorE-bound" in title and "estimated" in title and "not measured" in title
    labels = texts(root)
    assert "0 ms" in labels and any(t.endswith(" ms") and t != "0 ms" for t in labels)
    small = texts(parse(timeline_svg.render(estimate(latency_us=42.0))))
    assert "0 µs" in small and any(t.endswith(" µs") and t != "0 µs" for t in small)
    assert any("estimated" in t for t in small)


def test_no_external_resources_or_scripts() -> None:
    svg = timeline_svg.render(estimate(api=HOSTILE_API))
    low = svg.lower()
    for banned in ("<script", "href", "url(", "@import", "<image", "<foreignobject", "javascript:", "<style"):
        assert banned not in low, banned


def test_hostile_api_names_lanes_and_notes_are_escaped() -> None:
    est = estimate(bars=12, api=HOSTILE_API, notes=(HOSTILE_API,))
    est.timeline.append(TimelineBar(lane=f"DMA q2 {HOSTILE_API}", start_us=1.0, end_us=2.0, api=HOSTILE_API, line=3))
    svg = timeline_svg.render(est, subtitle=HOSTILE_API)
    root = parse(svg)  # well-formed despite <, &, ]]>, NUL and ESC in the strings
    assert "<script>" not in svg and "\x00" not in svg and "\x1b" not in svg
    tips = ["".join(t.itertext()) for t in root.iter(f"{NS}title")]
    assert any('<script>alert("x")</script> & ]]>' in t for t in tips)  # shown as text, not markup
    assert any('<script>alert("x")</script>' in t for t in texts(root))  # the note and subtitle


def test_zero_bars_writes_a_note_and_still_draws_the_lanes(tmp_path: Path) -> None:
    est = estimate(bars=0)
    path = timeline_svg.write(est, tmp_path / "empty.svg")
    root = parse(path.read_text(encoding="utf-8"))
    assert not bars(root)
    assert any("No timeline in this estimate" in t for t in texts(root))
    assert "TensorE" in texts(root)


def test_thousands_of_bars_stay_bounded_and_merged() -> None:
    est = estimate(bars=30_000)
    svg = timeline_svg.render(est)
    root = parse(svg)
    drawn = bars(root)
    assert 0 < len(drawn) <= 6 * timeline_svg.MAX_RUNS
    assert len(svg) < 8 << 20
    assert any("instructions:" in "".join(t.itertext()) for r in drawn for t in r.iter(f"{NS}title"))
    assert any("critical" in (r.get("class") or "") for r in drawn)


def test_bars_that_are_not_finite_are_skipped() -> None:
    est = estimate(bars=6)
    est.timeline += [TimelineBar(lane="TensorE", start_us=math.nan, end_us=1.0, api="x", line=1),
                     TimelineBar(lane="TensorE", start_us=5.0, end_us=math.inf, api="x", line=1),
                     TimelineBar(lane="TensorE", start_us=9.0, end_us=3.0, api="x", line=1)]
    root = parse(timeline_svg.render(est))
    assert len(bars(root)) == 6
    assert all(math.isfinite(float(r.get("x", "nan"))) and float(r.get("width", "-1")) > 0 for r in bars(root))


def test_nice_steps_and_lane_families() -> None:
    assert timeline_svg.nice_step(6970.0) == 1000.0 and timeline_svg.nice_step(42.0) == 10.0
    assert timeline_svg.nice_step(0.0) == 1.0
    assert [timeline_svg.engine_of(x) for x in ("TensorE", "DMA q15", "GpSimd", "Pool", "mystery")] == \
        ["tensor", "dma", "gpsimd", "gpsimd", "sync"]
    assert timeline_svg.lanes_of(estimate(bars=0).model_copy(update={"engines": []})) == []
