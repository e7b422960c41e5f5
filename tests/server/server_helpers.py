"""Helpers for the language-server tests (client side of the protocol)."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from lsprotocol import types as T
from pytest_lsp import LanguageClient

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
WORKSPACE = Path(__file__).resolve().parent / "workspace"
SERVER = [sys.executable, "-m", "nki_agent.server"]
# Agent runs started by tests record their trajectories here, never in the user's state folder.
TRAJECTORIES = tempfile.mkdtemp(prefix="nki-agent-test-trajectories-")
SERVER_ENV = {**os.environ, "NKI_AGENT_TRAJECTORY_DIR": TRAJECTORIES, "ANTHROPIC_API_KEY": "",
              "OPENAI_API_KEY": ""}


def apply_lsp_edits(text: str, edits: list[T.TextEdit]) -> str:
    """Apply LSP edits (UTF-16 positions against ``text``) as an editor does."""
    from nki_agent.server.positions import LineIndex

    index = LineIndex.of(text)
    spans = sorted(((index.offset(e.range.start.line, e.range.start.character),
                     index.offset(e.range.end.line, e.range.end.character), e.new_text) for e in edits), reverse=True)
    for s, e, new in spans:
        text = text[:s] + new + text[e:]
    return text


def record_publishes(client: LanguageClient) -> None:
    """Keep every publishDiagnostics (pytest-lsp keeps only the last per URI)."""
    client.published = []  # type: ignore[attr-defined]
    features = client.protocol.fm.features
    original = features[T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS]

    def wrapper(params: T.PublishDiagnosticsParams) -> Any:
        client.published.append(params)  # type: ignore[attr-defined]
        return original(params)

    features[T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = wrapper


async def start(client: LanguageClient, options: Any = None, capabilities: T.ClientCapabilities | None = None) -> None:
    record_publishes(client)
    client.lens_refreshes = 0  # type: ignore[attr-defined]

    @client.feature(T.WORKSPACE_CODE_LENS_REFRESH)
    def lens_refresh(params: Any) -> None:
        client.lens_refreshes += 1  # type: ignore[attr-defined]

    caps = capabilities or T.ClientCapabilities(
        window=T.WindowClientCapabilities(work_done_progress=True),
        workspace=T.WorkspaceClientCapabilities(code_lens=T.CodeLensWorkspaceClientCapabilities(refresh_support=True)))
    await client.initialize_session(T.InitializeParams(capabilities=caps, root_uri=ROOT.as_uri(),
                                                       initialization_options=options))


async def wait_publish(client: LanguageClient, uri: str, version: int | None = None, timeout: float = 20.0,
                       source: str | None = None) -> T.PublishDiagnosticsParams:
    """The first publish for ``uri`` (at ``version`` if given, containing ``source`` if given)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    seen = 0
    while loop.time() < deadline:
        pubs = client.published  # type: ignore[attr-defined]
        for p in pubs[seen:]:
            if p.uri == uri and (version is None or p.version == version) and \
                    (source is None or any(d.source == source for d in p.diagnostics)):
                return p
        seen = len(pubs)
        await asyncio.sleep(0.01)
    raise TimeoutError(f"no publishDiagnostics for {uri} v{version} source={source}")


def open_doc(client: LanguageClient, path: Path | str, text: str | None = None, version: int = 1) -> str:
    p = Path(path)
    uri = p.as_uri()
    client.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(
        uri=uri, language_id="python", version=version, text=p.read_text() if text is None else text)))
    return uri


def change(client: LanguageClient, uri: str, version: int, text: str,
           rng: T.Range | None = None) -> None:
    ev: Any = T.TextDocumentContentChangeWholeDocument(text=text) if rng is None else \
        T.TextDocumentContentChangePartial(range=rng, text=text)
    client.text_document_did_change(T.DidChangeTextDocumentParams(
        T.VersionedTextDocumentIdentifier(uri=uri, version=version), [ev]))


async def document_text(client: LanguageClient, uri: str) -> dict[str, Any]:
    res = await client.protocol.send_request_async("nki/documentText", {"uri": uri})
    return {"text": res.text, "version": res.version} if not isinstance(res, dict) else res


async def raw_request(client: LanguageClient, method: str, params: Any) -> Any:
    """A request whose result is left as plain JSON (lsprotocol structures a CodeAction that carries a
    ``command`` as a bare ``Command``, losing its kind and edit)."""
    proto = client.protocol
    proto.get_result_type = lambda m: None  # type: ignore[method-assign]
    try:
        return await proto.send_request_async(method, params)
    finally:
        del proto.get_result_type


def lsp_json(obj: Any) -> Any:
    from pygls.protocol import default_converter

    return default_converter().unstructure(obj)


class RawClient:
    """JSON-RPC over the server's stdio pipes, byte for byte (for malformed input and fuzzing)."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        import os
        import subprocess
        import threading

        self.proc = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env={**os.environ, **(env or {})}, cwd=str(ROOT))
        self.responses: dict[Any, list[dict[str, Any]]] = {}
        self.notifications: list[dict[str, Any]] = []
        self.cond = threading.Condition()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        import json

        out = self.proc.stdout
        assert out is not None
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    with self.cond:
                        self.cond.notify_all()
                    return
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
                elif line in (b"\r\n", b"\n") and length is not None:
                    break
            msg = json.loads(out.read(length))
            with self.cond:
                if "id" in msg and "method" not in msg:
                    self.responses.setdefault(msg["id"], []).append(msg)
                elif "method" in msg and "id" in msg:  # a server -> client request: answer it
                    self.send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
                else:
                    self.notifications.append(msg)
                self.cond.notify_all()

    def send_bytes(self, body: bytes, header: bytes | None = None) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((header if header is not None else b"Content-Length: %d\r\n\r\n" % len(body)) + body)
        self.proc.stdin.flush()

    def send(self, obj: Any) -> None:
        import json

        self.send_bytes(json.dumps(obj).encode())

    def request(self, method: str, params: Any = None, **extra: Any) -> int:
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method, **extra}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return self.next_id

    def notify(self, method: str, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def wait(self, ids: list[Any], timeout: float = 30.0) -> None:
        import time

        deadline = time.monotonic() + timeout
        with self.cond:
            while not all(i in self.responses for i in ids):
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    missing = [i for i in ids if i not in self.responses]
                    raise TimeoutError(f"no response for {missing[:10]} (server rc={self.proc.poll()})")
                self.cond.wait(left)

    def call(self, method: str, params: Any = None, timeout: float = 30.0) -> dict[str, Any]:
        i = self.request(method, params)
        self.wait([i], timeout)
        return self.responses[i][0]

    def initialize(self, options: Any = None) -> None:
        self.call("initialize", {"capabilities": {}, "rootUri": ROOT.as_uri(), "initializationOptions": options})
        self.notify("initialized", {})

    def close(self) -> int:
        try:
            self.call("shutdown", timeout=10)
            self.notify("exit", None)
            return self.proc.wait(10)
        except Exception:  # noqa: BLE001 - a hung server is killed
            self.proc.kill()
            return -1


def status(lens: T.CodeLens) -> bool:
    """A status lens (verdict, estimate, the runner's), not a runnable one: status titles start with "NKI"
    (``diagnostics/views/lens.py``), runnable ones never do (``diagnostics/views/runnables.py``)."""
    return lens.command is not None and lens.command.title.startswith("NKI")
