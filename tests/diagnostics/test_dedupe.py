"""The same problem from two tiers at the same place is published once (first tier wins, fixes merged)."""

from __future__ import annotations

from nki_agent.diagnostics.model import Diagnostic, Fix, TextEdit, dedupe


def _d(code: str, line: int, source: str, fixes: tuple[Fix, ...] = ()) -> Diagnostic:
    return Diagnostic(code, "error", f"{code} from {source}", "/k.py", line, 5, line, 9, source, "https://x", (), fixes)


def test_same_id_same_range_is_published_once() -> None:
    fix_a = Fix("Use 128 partitions", (TextEdit(3, 5, 3, 9, "128"),))
    fix_b = Fix("Split the tile", (TextEdit(3, 1, 3, 1, "# split\n"),))
    tagged = [("static", 0, _d("err_x", 3, "nki-check", (fix_a,))), ("simulate", 0, _d("err_x", 3, "nki-sim", (fix_b,))),
              ("simulate", 1, _d("err_x", 4, "nki-sim")), ("simulate", 2, _d("err_y", 3, "nki-sim")),
              ("verify", 0, _d("err_x", 3, "nki-verify", (fix_a,)))]
    out = dedupe(tagged)
    assert [(t, k, d.code, d.line) for t, k, d in out] == [("static", 0, "err_x", 3), ("simulate", 1, "err_x", 4),
                                                          ("simulate", 2, "err_y", 3)]
    assert out[0][2].source == "nki-check" and [f.title for f in out[0][2].fixes] == [fix_a.title, fix_b.title]
    assert out[0][2].message == "err_x from nki-sim"  # the run's message: it saw the values
    assert dedupe([]) == []


def test_the_simulators_message_wins_over_the_static_checks() -> None:
    """The static matmul-into-SBUF finding and the simulator's at the same call: one diagnostic, the
    simulator's words (variable name, where the tile was made), the static check's quick fix."""
    from pathlib import Path

    from nki_agent.diagnostics.static import check_text
    from nki_agent.toolchain.judging.verify import verify_files
    from nki_agent.diagnostics.model import from_problem

    path = Path(__file__).resolve().parents[1] / "fixtures" / "broken" / "matmul_dst_in_sbuf.py"
    (static,) = check_text(str(path), path.read_text())
    run = [from_problem(p, "nki-sim") for p in verify_files(str(path), str(path), seeds=1).problems]
    assert run and run[0].code == static.code
    (merged,) = [d for _t, _k, d in dedupe([("static", 0, static)] + [("verify", k, d) for k, d in enumerate(run)])
                 if d.code == static.code]
    assert merged.message == run[0].message and "`acc`" in merged.message
    assert merged.related == run[0].related and merged.fixes == static.fixes != ()
