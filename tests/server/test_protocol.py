"""Malformed traffic over real stdio pipes: the server answers every request once and stays up."""

from __future__ import annotations

from server_helpers import FIXTURES, RawClient

BAD = (FIXTURES / "static" / "partition_limit_bad.py").read_text()


def test_malformed_messages_do_not_kill_the_server():
    c = RawClient(env={"NKI_AGENT_MAX_MESSAGE_BYTES": str(1024 * 1024)})
    try:
        c.initialize()
        uri = "file:///tmp/nki-protocol-k.py"
        c.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": BAD}})
        c.send_bytes(b"{not json")
        c.send_bytes(b"[1, 2, 3]")
        c.send_bytes(b'"just a string"')
        c.send_bytes(b"", header=b"X-Noise: 1\r\n\r\n")
        c.send_bytes(b"\xff\xfe garbage")
        hover_bad = c.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": "bad", "character": 1}})
        hover_none = c.request("textDocument/hover", None)
        unknown = c.request("nki/doesNotExist", {})
        notif_with_id = c.request("textDocument/didOpen", {"textDocument": {"uri": uri}})
        c.send({"id": 9001, "method": "textDocument/hover", "params": {}})  # no "jsonrpc"
        c.send({"jsonrpc": "2.0", "id": {"x": 1}, "method": "textDocument/hover"})  # invalid id: no answer possible
        big = c.request("textDocument/hover", {"pad": "x" * (2 * 1024 * 1024)})
        c.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": "two"}, "contentChanges": 5})
        c.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 0},  # version going backwards
                                            "contentChanges": [{"text": "lost"}]})
        c.notify("$/unknownNotification", {"a": 1})
        cmd = c.request("workspace/executeCommand", {"command": "nki.explainError", "arguments": [{"not": "a code"}]})
        ids = [hover_bad, hover_none, unknown, notif_with_id, 9001, big, cmd]
        c.wait(ids)
        codes = {i: c.responses[i][0].get("error", {}).get("code") for i in ids}
        assert codes[hover_bad] == -32602
        assert codes[unknown] == -32601
        assert codes[notif_with_id] in (-32600, -32602) and codes[9001] == -32600 and codes[big] == -32600
        assert codes[hover_none] is not None and codes[cmd] is not None
        text = c.call("nki/documentText", {"uri": uri})["result"]
        assert text == {"uri": uri, "version": 1, "text": BAD}
        hover = c.call("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 8}})
        assert "result" in hover
        assert all(len(v) == 1 for v in c.responses.values())  # exactly once
        assert not [n for n in c.notifications if n["method"] == "window/showMessage"]  # no popups
        assert c.close() == 0
    finally:
        if c.proc.poll() is None:
            c.proc.kill()
