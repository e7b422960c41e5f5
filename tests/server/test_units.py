"""Unit tests of the server's pure parts: positions, document store, settings schema, task discovery."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nki_agent.server.documents import DocumentStore, apply_change
from nki_agent.server.positions import LineIndex, from_lsp, index_to_utf16, to_lsp, utf16_len, utf16_to_index
from nki_agent.server.settings import ServerSettings, contributes_configuration, parse
from nki_agent.server.tasks import discover

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("line, index, units", [
    ("abc", 2, 2), ("é+x", 2, 2), ("😀x", 1, 2), ("😀x", 2, 3), ("a𝔘b😀c", 4, 6), ("", 0, 0),
])
def test_utf16_roundtrip(line: str, index: int, units: int):
    assert index_to_utf16(line, index) == units
    assert utf16_to_index(line, units) == index


def test_utf16_clamps_and_snaps():
    assert utf16_to_index("😀x", 1) == 0  # between the surrogate halves: the character's start
    assert utf16_to_index("ab", 99) == 2 and index_to_utf16("ab", 99) == 2
    assert utf16_len("a😀é") == 4


def test_model_positions_with_astral_characters():
    lines = ['x = "😀"; y = nl.load(a)', "z"]
    col = lines[0].index("nl") + 1  # 1-based code points
    assert to_lsp(lines, 1, col) == (0, col)  # one astral char before: +1 unit
    assert from_lsp(lines, 0, col) == (1, col)
    assert from_lsp(lines, 5, 0) == (2, 2)  # past the end: end of document


def test_line_index_line_breaks():
    idx = LineIndex.of("a\r\nb\rc\nd")
    assert [idx.line_text(k) for k in range(4)] == ["a", "b", "c", "d"]
    assert idx.offset(2, 1) == 6 and idx.position(6) == (2, 1) and idx.offset(3, 0) == 7


def test_incremental_changes_and_versions():
    store = DocumentStore()
    store.open("file:///k.py", 1, "a😀b\nline2\n")
    snap = store.change("file:///k.py", 2, [((0, 3, 0, 4), "B"), ((1, 0, 1, 4), "LINE")])
    assert snap is not None and snap.text == "a😀B\nLINE2\n"
    assert store.change("file:///k.py", 2, [(None, "x")]) is None  # version did not increase
    assert store.change("file:///k.py", 1, [(None, "x")]) is None
    assert store.get("file:///k.py").text == "a😀B\nLINE2\n"
    assert store.change("file:///nope.py", 5, [(None, "x")]) is None
    assert apply_change("abc", (9, 9, 9, 9), "!") == "abc!"  # past the end: appended at the end


def test_settings_invalid_fields_fall_back():
    s, problems = parse({"nkiAgent": {"target": "trn2", "debounceMs": -1, "simulateOnSave": "no"}})
    assert s.target == "trn2" and s.debounce_ms == 20 and s.simulate_on_save is True
    assert len(problems) == 2
    assert parse(None) == (ServerSettings.model_validate({}), [])
    assert parse([1, 2])[1]


def test_package_json_configuration_in_sync():
    pkg = json.loads((ROOT / "package.json").read_text())
    assert pkg["name"] == "nki-agent"
    assert pkg["contributes"]["configuration"] == contributes_configuration(), \
        "regenerate with: python -m nki_agent.server.settings"


def test_task_discovery(tmp_path: Path):
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "t.py").write_text("def get_inputs(): return []\n")
    (tmp_path / "task.py").write_text("def get_inputs(): return []\n")
    k = str(tmp_path / "k.py")
    assert discover(k, "# nki-task: tasks/t.py\n", {}, str(tmp_path)).how == "comment"
    assert discover(k, "", {"k.py": "tasks/t.py"}, str(tmp_path)).how == "taskMap"
    assert discover(k, "def get_inputs():\n  pass\n", {}, str(tmp_path)).how == "self"
    assert discover(k, "", {}, str(tmp_path)).how == "sibling"
    assert discover(str(tmp_path / "tasks" / "k.py"), "", {}, None) is None
