"""``apply_change`` indexes only the lines an edit reads when the text's only line break is ``\\n``; it must
land exactly where the full line table (``LineIndex``) does, clamping included."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from nki_agent.server.documents import _line_index_to, apply_change
from nki_agent.server.positions import LineIndex

texts = st.lists(st.sampled_from(["a", "é", "\U0001F600", " ", "\n", "\n\n", "\t"]), max_size=40).map("".join)
positions = st.integers(-2, 12)


@settings(max_examples=400, deadline=None)
@given(texts, positions, positions)
def test_partial_line_table_answers_as_the_full_one(text: str, line: int, character: int) -> None:
    assert _line_index_to(text, line).offset(line, character) == LineIndex.of(text).offset(line, character)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "\U0001F600", "\n", "\r\n", "\r"]), max_size=30).map("".join),
       st.tuples(positions, positions, positions, positions), st.sampled_from(["", "x", "\n", "\r\n"]))
def test_apply_change_equals_the_line_table(text: str, rng: tuple[int, int, int, int], new_text: str) -> None:
    index = LineIndex.of(text)
    start, end = index.offset(rng[0], rng[1]), index.offset(rng[2], rng[3])
    start, end = min(start, end), max(start, end)
    assert apply_change(text, rng, new_text) == text[:start] + new_text + text[end:]
