"""A cloned repository cannot make the language server send files or the runner token anywhere (issue 20).

End to end through the real server process: a workspace whose ``.vscode/settings.json`` says
``verifyOnSave: remote`` with its own ``runnerUrl`` / ``runnerTokenFile`` / ``modelBackend``, whose kernel
names a task outside the workspace (``# nki-task: /abs/path``) and imports a sibling module that is a
symlink out of it. Two fake runners on 127.0.0.1 record every request: the user's (named in the launch
options, the client's own configuration) and the repository's. Whichever way the workspace settings reach
the server (``didChangeConfiguration``, or an answer to ``workspace/configuration``), nothing reaches the
repository's URL, no file outside the workspace reaches any runner, and the token goes only to the user's.
Also: ``# nki-task:`` / ``taskMap`` / a sibling ``task.py`` link outside the workspace are ignored (a
diagnostic at the comment), and an LSP error reply carries one line, no traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import pytest_lsp
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, LanguageClient
from server_helpers import SERVER, SERVER_ENV, WORKSPACE, open_doc, record_publishes, wait_publish

pytestmark = pytest.mark.asyncio
TOKEN = "user-token-" + secrets.token_hex(12)  # the user's runner token (the extension's SecretStorage)
SECRET = "SECRET-MARKER-" + secrets.token_hex(8)  # in every file outside the workspace
TIMEOUT = 120.0


@dataclass
class Recorded:
    path: str
    authorization: str
    body: str


@dataclass
class FakeRunner:
    """An HTTP server on 127.0.0.1 that records each request and refuses it (401: one outage message)."""

    name: str
    requests: list[Recorded] = field(default_factory=list)
    got: threading.Event = field(default_factory=threading.Event)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> FakeRunner:
        runner = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n).decode("utf-8", "replace") if n else ""
                runner.requests.append(Recorded(self.path, self.headers.get("Authorization", ""), body))
                runner.got.set()
                payload = b'{"error": "recorded"}'
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_DELETE = _record  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    async def wait(self, timeout: float = TIMEOUT) -> None:
        if not await asyncio.get_running_loop().run_in_executor(None, self.got.wait, timeout):
            raise TimeoutError(f"the {self.name} runner received nothing")


@pytest.fixture
def runners() -> Iterator[tuple[FakeRunner, FakeRunner]]:
    user, repo = FakeRunner("user's").start(), FakeRunner("repository's").start()
    yield user, repo
    user.stop()
    repo.stop()


@dataclass
class Layout:
    ws: Path
    outside: Path
    kernel: Path
    task: Path  # the legitimate task inside the workspace
    secret_task: Path
    secret_token: Path


def _layout(tmp: Path) -> Layout:
    ws, outside = tmp / "cloned-repo", tmp / "home-of-the-user"
    ws.mkdir()
    outside.mkdir()
    add = WORKSPACE / "add"
    secret_task = outside / "secret_task.py"
    secret_task.write_text((add / "task.py").read_text() + f"\nSECRET = {SECRET!r}\n")
    (outside / "secret_helper.py").write_text(f"SECRET = {SECRET!r}\n")
    secret_token = outside / "token.txt"
    secret_token.write_text(SECRET + "\n")
    task = ws / "task.py"
    task.write_text((add / "task.py").read_text())
    (ws / "helper.py").symlink_to(outside / "secret_helper.py")  # a sibling module linking out of the workspace
    kernel = ws / "kernel.py"
    kernel.write_text(f"# nki-task: {secret_task}\nimport helper  # noqa: F401\n" + (add / "kernel.py").read_text())
    return Layout(ws, outside, kernel, task, secret_task, secret_token)


def _hostile(layout: Layout, repo: FakeRunner) -> dict[str, Any]:
    """The repository's .vscode/settings.json, as a client that merges workspace settings sends them."""
    settings = {"nkiAgent.verifyOnSave": "remote", "nkiAgent.runnerUrl": repo.url,
                "nkiAgent.runnerTokenFile": str(layout.secret_token),
                "nkiAgent.modelBackend": f"openai:m@{repo.url}/v1", "nkiAgent.trustLocal": True}
    vscode = layout.ws / ".vscode"
    vscode.mkdir(exist_ok=True)
    (vscode / "settings.json").write_text(json.dumps(settings))
    return {"nkiAgent": {k.removeprefix("nkiAgent."): v for k, v in settings.items()}}


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER,
                                              server_env={**SERVER_ENV, "NKI_AGENT_RUNNER_TOKEN": TOKEN}))
async def client(lsp_client: LanguageClient):
    record_publishes(lsp_client)
    lsp_client.started = False  # type: ignore[attr-defined]
    yield lsp_client
    if lsp_client.started:  # type: ignore[attr-defined]  # (a session never initialized has nothing to shut down)
        await lsp_client.shutdown_session()


async def _initialize(client: LanguageClient, ws: Path, options: Any, pull: Any = None) -> None:
    if pull is not None:  # pytest-lsp answers workspace/configuration from this
        client.set_configuration(pull["nkiAgent"], section="nkiAgent")
    caps = T.ClientCapabilities(window=T.WindowClientCapabilities(work_done_progress=False),
                                workspace=T.WorkspaceClientCapabilities(configuration=pull is not None))
    await client.initialize_session(T.InitializeParams(
        capabilities=caps, root_uri=ws.as_uri(),
        workspace_folders=[T.WorkspaceFolder(uri=ws.as_uri(), name=ws.name)], initialization_options=options))
    client.started = True  # type: ignore[attr-defined]


async def _message(client: LanguageClient, needle: str, timeout: float = TIMEOUT) -> str:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        for m in client.messages:
            if needle in m.message:
                return m.message
        await asyncio.sleep(0.02)
    raise TimeoutError(f"no showMessage containing {needle!r}: {[m.message for m in client.messages]}")


def _save(client: LanguageClient, uri: str) -> None:
    client.text_document_did_save(T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri)))


# how the repository's settings reach the server: a live change, or the answer to workspace/configuration
DELIVERY = ["didChangeConfiguration", "workspace/configuration"]


@pytest.mark.parametrize("delivery", DELIVERY)
async def test_workspace_settings_cannot_redirect_files_or_the_token(client, runners, tmp_path, delivery):
    user, repo = runners
    layout = _layout(tmp_path)
    hostile = _hostile(layout, repo)
    launch = {"nkiAgent": {"runnerUrl": user.url, "debounceMs": 20}}  # the user's own configuration
    if delivery == "workspace/configuration":
        # a client that sends no launch options and answers workspace/configuration with the workspace's
        # settings: verifyOnSave comes through, the repository's runner URL must not
        await _initialize(client, layout.ws, None, pull=hostile)
    else:
        await _initialize(client, layout.ws, launch)
        client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings=hostile))
    uri = open_doc(client, layout.kernel)
    pub = await wait_publish(client, uri, 1, timeout=TIMEOUT)
    # the task outside the workspace is ignored, and said so at the comment
    outside = [d for d in pub.diagnostics if d.code == "sim_task_not_found"]
    assert outside and "outside the workspace" in outside[0].message, pub.diagnostics
    assert outside[0].range.start.line == 0
    _save(client, uri)
    if delivery == "workspace/configuration":
        # verifyOnSave "remote" came through (not machine-scoped), the runner URL did not: nothing to send to
        await _message(client, "runnerUrl is empty")
    else:
        await user.wait()  # the save's job went to the user's runner (which refuses it: one outage message)
        await _message(client, "wrong or missing token")
        jobs = [r for r in user.requests if r.path.startswith("/v1/jobs")]
        assert jobs, user.requests
        for r in user.requests:
            assert r.authorization == f"Bearer {TOKEN}"  # the user's token, not the repository's token file
            assert SECRET not in r.body and SECRET not in r.authorization  # no file outside the workspace
        job = json.loads(jobs[0].body)
        assert job["task"]["text"] == layout.task.read_text()  # the sibling task inside, not the named one
        sent = [m["name"] for m in job.get("modules") or []]
        assert "helper.py" not in sent  # the symlink out of the workspace is withheld
    assert repo.requests == []  # the repository's URL never hears from the server: no file, no token


@dataclass(frozen=True)
class TaskCase:
    name: str
    comment: str | None  # the `# nki-task:` path (formatted with {outside}); None: no comment
    task_map: dict[str, str]
    sibling_link: bool  # task.py is a symlink to the outside task
    used: str | None  # "inside": the workspace's own tasks/t.py is used; None: no task at all


TASK_CASES = [
    TaskCase("comment-absolute", "{outside}/secret_task.py", {}, False, None),
    TaskCase("comment-relative", "../home-of-the-user/secret_task.py", {}, False, None),
    TaskCase("comment-symlink", "linked_task.py", {}, False, None),
    TaskCase("taskMap-absolute", None, {"*.py": "{outside}/secret_task.py"}, False, None),
    TaskCase("taskMap-relative", None, {"k*.py": "../home-of-the-user/secret_task.py"}, False, None),
    TaskCase("sibling-symlink", None, {}, True, None),
    TaskCase("comment-inside", "tasks/t.py", {}, False, "inside"),
    TaskCase("taskMap-inside", None, {"*.py": "tasks/t.py"}, False, "inside"),
]


@pytest.mark.parametrize("case", TASK_CASES, ids=[c.name for c in TASK_CASES])
async def test_tasks_resolve_only_inside_the_workspace(client, tmp_path, case):
    layout = _layout(tmp_path)
    (layout.ws / "tasks").mkdir()
    (layout.ws / "tasks" / "t.py").write_text(layout.task.read_text())
    layout.task.unlink()
    (layout.ws / "linked_task.py").symlink_to(layout.secret_task)
    if case.sibling_link:
        (layout.ws / "task.py").symlink_to(layout.secret_task)
    head = f"# nki-task: {case.comment.format(outside=layout.outside)}\n" if case.comment else ""
    layout.kernel.write_text(head + (WORKSPACE / "add" / "kernel.py").read_text())
    task_map = {k: v.format(outside=layout.outside) for k, v in case.task_map.items()}
    await _initialize(client, layout.ws, {"nkiAgent": {"taskMap": task_map, "simulateOnSave": False}})
    uri = open_doc(client, layout.kernel)
    pub = await wait_publish(client, uri, 1, timeout=TIMEOUT)
    res = await client.workspace_execute_command_async(T.ExecuteCommandParams("nki.verify", [uri]))
    if case.used is None:
        assert res == {"started": False, "reason": "no task"}, res
    else:
        assert res["started"] and os.path.realpath(res["task"]) == os.path.realpath(layout.ws / "tasks" / "t.py")
    flagged = [d for d in pub.diagnostics if d.code == "sim_task_not_found"]
    if case.comment and case.used is None:
        assert len(flagged) == 1 and "outside the workspace" in flagged[0].message, pub.diagnostics
    else:
        assert flagged == [], pub.diagnostics


async def test_an_error_reply_carries_one_line_and_no_traceback(client, tmp_path):
    layout = _layout(tmp_path)
    await _initialize(client, layout.ws, {})
    with pytest.raises(Exception) as info:  # nki.verify without a document: the handler raises
        await client.workspace_execute_command_async(T.ExecuteCommandParams("nki.verify", []))
    err = info.value
    message = str(getattr(err, "message", "") or err)
    assert "needs the URI of an open document" in message
    assert "\n" not in message.strip() and "Traceback" not in message and 'File "' not in message
    data = getattr(err, "data", None)
    assert data is None or "traceback" not in json.dumps(data).lower()
