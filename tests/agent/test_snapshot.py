"""Minimal edits and the stale-edit guard (property-based)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nki_agent.agent.snapshot import Snapshot, apply_if_current, minimal_edit

TEXT = st.text(alphabet=st.sampled_from(list("ab \n\r😀é")), max_size=60)


@settings(max_examples=500, deadline=None)
@given(TEXT, TEXT)
def test_minimal_edit_turns_old_into_new_in_whole_lines(old: str, new: str) -> None:
    edit = minimal_edit(old, new)
    if old == new:
        assert edit is None
        return
    assert edit is not None and edit.apply(old) == new
    assert edit.start == 0 or old[edit.start - 1] == "\n"  # starts at a line start
    assert edit.end == len(old) or old[edit.end - 1] == "\n"  # ends after a line break (never inside \r\n)


def test_crlf_is_never_split() -> None:
    edit = minimal_edit("x = a\r\ny = 1\r\n", "x = b\r\ny = 1\r\n")
    assert edit is not None and edit.new_text == "x = b\r\n" and (edit.start, edit.end) == (0, 7)


@settings(max_examples=300, deadline=None)
@given(TEXT, TEXT, TEXT)
def test_a_stale_edit_is_never_applied(base: str, fixed: str, typed: str) -> None:
    snap = Snapshot("file:///k.py", 3, base)
    edit = minimal_edit(base, fixed)
    if edit is None:
        return
    assert apply_if_current(Snapshot("file:///k.py", 3, base), snap, edit) == fixed
    assert apply_if_current(Snapshot("file:///k.py", 4, typed), snap, edit) is None
    if typed != base:
        assert apply_if_current(Snapshot("file:///k.py", None, typed), Snapshot("file:///k.py", None, base), edit) is None
