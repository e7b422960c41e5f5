"""Fuzzing over a real stdio connection: random edits, requests and malformed messages.

Properties: the server stays up, answers every request exactly once, sends no popups, and its
document text equals a reference model that applies the same UTF-16 edits independently
(``nki/documentText``). Default: 40 examples x 250+ messages (>= 10,000 messages in total);
``NKI_FUZZ_FULL=1`` runs 10x more.
"""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from server_helpers import FIXTURES, RawClient

FULL = os.environ.get("NKI_FUZZ_FULL") == "1"
EXAMPLES = 400 if FULL else 40
OPS = 250
BAD = (FIXTURES / "static" / "partition_limit_bad.py").read_text()
STATE = {"messages": 0, "docs": 0}

_BREAK = re.compile(r"(\r\n|\r|\n)")


def ref_apply(text: str, sl: int, sc: int, el: int, ec: int, new: str) -> str:
    """Reference LSP edit: work on UTF-16 code units of the whole text."""
    parts = _BREAK.split(text)
    contents, seps = parts[0::2], parts[1::2] + [""]
    starts, pos = [], 0
    for content, sep in zip(contents, seps):
        starts.append(pos)
        pos += len(content.encode("utf-16-le")) // 2 + len(sep)
    total = pos

    def off(line: int, ch: int) -> int:
        if line >= len(contents):
            return total
        return starts[line] + min(ch, len(contents[line].encode("utf-16-le")) // 2)

    s, e = sorted((off(sl, sc), off(el, ec)))
    u = text.encode("utf-16-le")
    return (u[: 2 * s] + new.encode("utf-16-le") + u[2 * e:]).decode("utf-16-le")


def unit_positions(text: str) -> list[tuple[int, int]]:
    """Every valid (line, utf16 character) boundary of ``text`` (plus one past each line end)."""
    out = []
    for k, content in enumerate(_BREAK.split(text)[0::2]):
        units = 0
        out.append((k, 0))
        for ch in content:
            units += 2 if ord(ch) > 0xFFFF else 1
            out.append((k, units))
        out.append((k, units + 3))
    return out


ALPHABET = st.sampled_from(["x", "é", "😀", "𝔘", "\n", "\r\n", " ", "nl.load(a)", "# nki", "\t", "(", ")", "",
                            "import neuronxcc.nki.language as nl\n", "\r"])
NEW_TEXT = st.lists(ALPHABET, max_size=6).map("".join)
EDIT = st.tuples(st.just("edit"), st.integers(0, 10**6), st.integers(0, 10**6), NEW_TEXT)
OP = st.one_of(
    EDIT, EDIT, EDIT,  # edits weigh more: they are what the reference model checks
    st.tuples(st.just("replace"), st.sampled_from([BAD, "", "😀\r\n\r\nz", "a\rb\nc", "é😀𝔘x\n😀😀 y"])),
    st.tuples(st.just("request"), st.sampled_from(["textDocument/hover", "textDocument/inlayHint",
                                                   "textDocument/codeAction", "textDocument/codeLens",
                                                   "nki/documentText", "nki/unknown"]), st.integers(0, 10**6)),
    st.tuples(st.just("garbage"), st.binary(max_size=40)),
    st.tuples(st.just("badparams"), st.sampled_from(["textDocument/hover", "textDocument/codeAction",
                                                     "workspace/executeCommand", "textDocument/inlayHint"]),
              st.sampled_from([None, 1, "x", [], {"position": {"line": -1}}, {"textDocument": 5}])),
    st.tuples(st.just("stale"),),
)


@pytest.fixture(scope="module")
def server():
    c = RawClient()
    c.initialize({"nkiAgent": {"debounceMs": 5}})
    yield c
    assert c.close() == 0, "the server did not exit cleanly after the fuzz run"
    print(f"fuzz: {STATE['messages']} messages over {STATE['docs']} documents")
    assert STATE["messages"] >= (10_000 if EXAMPLES >= 40 else 0)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=not FULL, database=None,
          # shrinking replays hundreds of 250-message sessions: only in FULL mode, to keep failures fast
          phases=list(Phase) if FULL else [Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ops=st.lists(OP, min_size=OPS, max_size=OPS))
def test_fuzz_messages_and_edits(server: RawClient, ops: list[tuple]):
    STATE["docs"] += 1
    uri = f"file:///tmp/nki-fuzz/{STATE['docs']}.py"
    text, version = BAD, 1
    server.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}})
    ids: list[int] = []
    checks: dict[int, tuple[int, str]] = {}
    sent = 1
    for op in ops:
        sent += 1
        kind = op[0]
        if kind == "edit":
            positions = unit_positions(text)
            (sl, sc), (el, ec) = positions[op[1] % len(positions)], positions[op[2] % len(positions)]
            if op[1] % 11 == 0:
                sl, sc = sl + 50, 0  # past the end of the document
            version += 1
            server.notify("textDocument/didChange", {
                "textDocument": {"uri": uri, "version": version},
                "contentChanges": [{"range": {"start": {"line": sl, "character": sc}, "end": {"line": el, "character": ec}},
                                    "text": op[3]}]})
            text = ref_apply(text, sl, sc, el, ec, op[3])
        elif kind == "replace":  # check the text before it is replaced (a divergence must not be wiped out)
            checks[server.request("nki/documentText", {"uri": uri})] = (version, text)
            sent += 1
            version += 1
            server.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                     "contentChanges": [{"text": op[1]}]})
            text = op[1]
        elif kind == "request":
            positions = unit_positions(text)
            line, ch = positions[op[2] % len(positions)]
            rng = {"start": {"line": 0, "character": 0}, "end": {"line": line, "character": ch}}
            params = {"textDocument": {"uri": uri}, "position": {"line": line, "character": ch}, "range": rng,
                      "context": {"diagnostics": []}, "uri": uri}
            ids.append(server.request(op[1], params))
        elif kind == "garbage":
            server.send_bytes(op[1])
        elif kind == "badparams":
            ids.append(server.request(op[1], op[2]))
        else:  # a stale version must be ignored
            server.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": max(0, version - 1)},
                                                     "contentChanges": [{"text": "STALE"}]})
    checks[server.request("nki/documentText", {"uri": uri})] = (version, text)
    sent += 1
    ids.extend(checks)
    server.wait(ids, timeout=60)
    assert all(len(server.responses[i]) == 1 for i in ids), "a request was answered more than once"
    for i, (v, t) in checks.items():
        assert server.responses[i][0]["result"] == {"uri": uri, "version": v, "text": t}
    assert server.proc.poll() is None
    assert not [n for n in server.notifications if n["method"] == "window/showMessage"]
    server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    STATE["messages"] += sent + 1
    server.notifications.clear()
