"""didChange → publishDiagnostics is not held back by the debounce while checks keep up with typing: the
debounce applies only when the document's checks take longer than the pause between keystrokes (a burst is
then checked once, at its end)."""

from __future__ import annotations

from typing import Any

import pytest
from lsprotocol import types as T
from pytest_lsp import LanguageClient
from server_helpers import WORKSPACE, change, open_doc, start, wait_publish

pytestmark = pytest.mark.asyncio
TEXT = (WORKSPACE / "add" / "kernel.py").read_text()


async def _stats(client: LanguageClient) -> Any:
    return await client.protocol.send_request_async("nki/stats", {})


def _edit(version: int) -> tuple[str, T.Range]:
    """A comment line appended (the kernel is unchanged)."""
    line = TEXT.count("\n") + version - 2
    return f"# edit {version}\n", T.Range(T.Position(line, 0), T.Position(line, 0))


async def test_edits_with_pauses_are_checked_at_once(bare_client: LanguageClient, tmp_path: Any) -> None:
    # a 60 s debounce would make every publish below time out if it applied
    await start(bare_client, {"nkiAgent": {"debounceMs": 60000, "simulateOnSave": False}})
    uri = open_doc(bare_client, tmp_path / "kernel.py", TEXT)
    await wait_publish(bare_client, uri, 1)
    for version in range(2, 6):  # each edit waits for the previous publish: typing slower than checking
        text, rng = _edit(version)
        change(bare_client, uri, version, text, rng)
        await wait_publish(bare_client, uri, version, timeout=30)
    assert (await _stats(bare_client)).debounced == 0


async def test_a_burst_faster_than_checks_is_debounced_once(bare_client: LanguageClient, tmp_path: Any) -> None:
    await start(bare_client, {"nkiAgent": {"debounceMs": 400, "simulateOnSave": False}})
    uri = open_doc(bare_client, tmp_path / "kernel.py", TEXT)
    await wait_publish(bare_client, uri, 1)
    text, rng = _edit(2)
    change(bare_client, uri, 2, text, rng)
    await wait_publish(bare_client, uri, 2)
    for version in range(3, 9):  # back to back: no pause between these keystrokes
        text, rng = _edit(version)
        change(bare_client, uri, version, text, rng)
    last = await wait_publish(bare_client, uri, 8)
    assert [d.code for d in last.diagnostics] == []
    stats = await _stats(bare_client)
    assert stats.debounced >= 1  # keystrokes came faster than the last check took: they waited
    assert stats.static_runs < 8, stats  # and the burst was not checked once per keystroke
