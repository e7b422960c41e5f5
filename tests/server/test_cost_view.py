"""``diagnostics.cost_view``: the estimate's lines placed on edited text, and the phrases people read."""

from __future__ import annotations

import pytest
from cost_helpers import EXAMPLE, K_LINE, KERNEL_LINE, M_LINE, MATMUL, N_LINE, matmul_estimate
from hypothesis import given, settings
from hypothesis import strategies as st
from nki_agent.diagnostics import cost_view
from nki_agent.diagnostics.cost_view import (
    estimate_markdown,
    line_map,
    line_phrase,
    loop_hint,
    loop_phrase,
    pct,
    place,
)
from nki_agent.toolchain.protocol.cost import LineCost, LoopCost

TEXT = (EXAMPLE / "kernel_classic.py").read_text()


def test_the_phrases_say_estimated_and_read_as_specified() -> None:
    loop = LoopCost(line=1, var="m", kind="affine", trips=512, us=2860.0, share=0.41, bound="DMA",
                    hbm_bytes=1 << 20, hbm_utilisation=0.23)
    assert loop_phrase(loop) == "this loop: 41 % of estimated time, DMA-bound, 23 % of HBM bandwidth, 512 trips (affine)"
    assert loop_hint(loop) == "≈ 41 % · DMA"
    one = LoopCost(line=1, var="i", kind="sequential", trips=1, us=1.0, share=0.0001, bound="VectorE")
    assert loop_phrase(one) == "this loop: < 1 % of estimated time, VectorE-bound, 1 trip (sequential)"
    cost = LineCost(line=3, us=3100.0, share=0.12, engine="tensor", api="nisa.nc_matmul")
    assert line_phrase(cost) == "this line: 12 % of estimated time (nisa.nc_matmul on TensorE, 3.1 ms)"
    assert line_phrase(LineCost(line=3, us=41.5, share=0.5, engine="dma")) == \
        "this line: 50 % of estimated time (on DMA, 41.5 µs)"
    assert [pct(x) for x in (0.0, 0.004, 0.006, 0.414, 1.0)] == ["0 %", "< 1 %", "1 %", "41 %", "100 %"]


def test_the_kernel_markdown_has_the_summary_the_engine_table_and_the_notes() -> None:
    md = estimate_markdown(matmul_estimate(), "**matmul_kernel** — cost model estimate")
    assert md.startswith("**matmul_kernel** — cost model estimate\n\n≈ 6.97 ms est. trn1, TensorE-bound")
    assert "not a measurement" in md and "measured" not in md.replace("not a measurement", "")
    assert "| engine | busy (est.) | utilisation | instructions |" in md
    rows = [r for r in md.split("\n") if r.startswith("| ") and "---" not in r][1:]
    assert rows == ["| TensorE | 6.5 ms | 93 % | 1,024 |", "| DMA q0 | 2.1 ms | 30 % | 512 |",
                    "| VectorE | 120 µs | 2 % | 8 |"]  # busiest first; an idle lane is left out
    assert "launch overhead 15 µs" in md and "1.07 GFLOP (65 % of TensorE peak)" in md and "8 MB HBM traffic" in md
    assert md.endswith("- PSUM accumulation modelled as in-place")


def test_the_dma_queues_share_one_row_and_a_truncated_trace_says_so() -> None:
    est = matmul_estimate()
    queues = [est.engines[1].model_copy(update={"lane": f"DMA q{i}", "busy_us": 100.0 + i, "instructions": 2})
              for i in range(12)]
    est.engines = [est.engines[0], *queues, est.engines[2]]
    est.truncated = True
    md = estimate_markdown(est, "h")
    rows = [r for r in md.split("\n") if r.startswith("| ") and "---" not in r][1:]
    assert rows == ["| TensorE | 6.5 ms | 93 % | 1,024 |", "| VectorE | 120 µs | 2 % | 8 |",
                    "| DMA (12 queues, busiest) | 111 µs | 30 % | 24 |"]
    assert "covers only the recorded part" in md


def test_a_line_without_time_has_no_cost() -> None:
    est = matmul_estimate()
    est.lines.append(LineCost(line=28, us=0.0, share=0.0, engine="tensor"))
    assert place(est, TEXT, TEXT).line_at(28) is None


def test_the_same_text_places_every_cost_on_its_own_line() -> None:
    view = place(matmul_estimate(), TEXT, TEXT)
    assert not view.stale
    assert sorted(view.loops) == [M_LINE, N_LINE, K_LINE]
    assert view.loop_at(K_LINE) is not None and view.loop_at(K_LINE).var == "k"  # type: ignore[union-attr]
    assert view.line_at(MATMUL) is not None and view.line_at(MATMUL).api == "nisa.nc_matmul"  # type: ignore[union-attr]
    assert view.loop_at(MATMUL) is None and view.line_at(M_LINE) is None
    assert view.kernel_line([("matmul_kernel", KERNEL_LINE)]) == KERNEL_LINE


def test_after_an_edit_costs_follow_their_lines_and_edited_lines_have_none() -> None:
    lines = TEXT.split("\n")
    lines[K_LINE - 1] = lines[K_LINE - 1].replace("K // TILE_K", "K // TILE_K // 2")  # the k header edited
    edited = "# a comment\n# another\n" + "\n".join(lines)
    view = place(matmul_estimate(), edited, TEXT)
    assert view.stale
    assert sorted(view.loops) == [M_LINE + 2, N_LINE + 2]  # m and n moved down two lines; k is gone
    assert [c.api if c else None for c in (view.line_at(MATMUL + 2), view.line_at(MATMUL))] == \
        ["nisa.nc_matmul", "nl.load"]  # what is at the matmul's old line now is the first load
    assert view.kernel_line([("matmul_kernel", KERNEL_LINE + 2)]) == KERNEL_LINE + 2


def test_an_unknown_run_text_places_nothing() -> None:
    view = place(matmul_estimate(), TEXT, None)
    assert view.stale and not view.loops and not view.lines
    assert view.kernel_line([("matmul_kernel", KERNEL_LINE)]) == KERNEL_LINE  # the file's only kernel
    assert view.kernel_line([("a", 1), ("b", 9)]) is None


def test_the_kernel_is_the_named_one_else_the_one_holding_the_costliest_line() -> None:
    two = [("helper_kernel", 1), ("matmul_kernel", KERNEL_LINE), ("later_kernel", 40)]
    view = place(matmul_estimate(), TEXT, TEXT)
    assert view.kernel_line(two) == KERNEL_LINE
    named = place(matmul_estimate(), TEXT, TEXT, kernel="later_kernel")
    assert named.kernel_line(two) == 40


def test_line_map_head_tail_and_middle() -> None:
    old = "a\nb\nc\nd\ne\nf"
    m = line_map(old, "a\nX\nb\nc\nd\nf")  # insert after 1, delete e
    assert [m(i) for i in range(8)] == [None, 1, 3, 4, 5, None, 6, None]
    same = line_map(old, old)
    assert [same(i) for i in range(1, 7)] == [1, 2, 3, 4, 5, 6]


def test_a_huge_rewrite_maps_only_the_unchanged_head_and_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cost_view, "MAX_DIFF_PAIRS", 0)
    m = cost_view.line_map.__wrapped__("h\n1\n2\nt", "h\n2\n1\nt")
    assert [m(i) for i in range(1, 5)] == [1, None, None, 4]
    monkeypatch.setattr(cost_view, "MAX_DIFF_PAIRS", 4)
    m = cost_view.line_map.__wrapped__("h\n1\n2\nt", "h\n2\n1\nt")
    assert [m(i) for i in range(1, 5)] in ([1, None, 2, 4], [1, 3, None, 4])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", "", "for m in r:"]), max_size=30),
       st.lists(st.tuples(st.integers(0, 30), st.integers(0, 3), st.sampled_from(["a", "x", "", "y"])), max_size=5))
def test_a_mapped_line_always_has_the_same_text_and_order_is_kept(base: list[str],
                                                                    edits: list[tuple[int, int, str]]) -> None:
    new = list(base)
    for at, cut, text in edits:
        at = min(at, len(new))
        new[at:at + cut] = [text]
    old_text, new_text = "\n".join(base), "\n".join(new)
    m = line_map(old_text, new_text)
    a, b = old_text.split("\n"), new_text.split("\n")
    pairs = [(i, m(i)) for i in range(1, len(a) + 1) if m(i) is not None]
    assert all(a[i - 1] == b[j - 1] for i, j in pairs if j is not None)
    targets = [j for _, j in pairs]
    assert targets == sorted(targets) and len(set(targets)) == len(targets)
