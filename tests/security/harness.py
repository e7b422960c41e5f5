"""The tool process of the security tests: ``api.verify``, ``api.simulate`` and ``ToolBox.verify`` on request.

The tests never run a hostile kernel's verification in the pytest process itself: without an OS
sandbox a kernel can kill or freeze its parent, and the parent must be a process whose death is a
test failure, not the end of the test session. This process is that parent — the same calls an
editor integration or the agent makes, in a long-lived process like theirs.

Usage: ``python harness.py ANSWER_FD NONCE``. Requests are JSON lines on stdin:
``{"id", "op", "env", "cwd", "tmpdir", ...}`` with ``op`` one of ``ping``, ``api_verify``, ``simulate``,
``agent_verify``. ``env`` is applied to ``os.environ`` for the request (``null`` removes a variable),
``cwd`` and ``tmpdir`` (``tempfile.tempdir``) likewise, and all three are restored afterwards. Each
answer is one JSON line ``{"nonce", "id", "answer"}`` on ANSWER_FD; this process's own stdout is
redirected to stderr so that nothing else can write on the answer channel.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
from typing import Any


def _apply(req: dict[str, Any]) -> tuple[dict[str, str | None], str, str | None]:
    saved = {k: os.environ.get(k) for k in (req.get("env") or {})}
    for k, v in (req.get("env") or {}).items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = str(v)
    cwd = os.getcwd()
    if req.get("cwd"):
        os.chdir(req["cwd"])
    tmp = tempfile.tempdir
    if req.get("tmpdir"):
        tempfile.tempdir = req["tmpdir"]
    return saved, cwd, tmp


def _restore(saved: dict[str, str | None], cwd: str, tmp: str | None) -> None:
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        os.chdir(cwd)
    except OSError:
        os.chdir("/")
    tempfile.tempdir = tmp


def handle(req: dict[str, Any]) -> Any:
    op = req.get("op")
    if op == "ping":
        return {"pid": os.getpid()}
    from nki_agent.toolchain import api

    timeout = float(req.get("timeout", 30.0))
    if op == "api_verify":  # answers are JSON: the result models as their JSON
        res = api.verify(req["kernel"], req["task"], seeds=int(req.get("seeds", 2)), timeout=timeout)
        return res.model_dump(mode="json")
    if op == "simulate":
        return api.simulate(req["kernel"], req["task"], timeout=timeout).model_dump(mode="json")
    if op == "agent_verify":
        from nki_agent.agent.tools import ToolBox

        with open(req["kernel"], encoding="utf-8") as f:
            text = f.read()
        box = ToolBox(req["kernel"], text, req["task"], seeds=int(req.get("seeds", 2)), timeout=timeout)
        try:
            outcome = box.verify(text)
        finally:
            box.close()
        return {"verified": outcome.verified, "content": outcome.content, "is_error": outcome.is_error,
                "raw": outcome.result.model_dump(mode="json") if outcome.result is not None else {},
                "diagnostics": [d.as_dict() for d in outcome.diagnostics]}
    return {"error": f"unknown op {op!r}"}


def main() -> int:
    answer_fd, nonce = int(sys.argv[1]), sys.argv[2]
    out = os.fdopen(answer_fd, "w", encoding="utf-8")
    os.dup2(2, 1)
    from nki_agent.agent import tools  # imported once, before the first request
    from nki_agent.toolchain import api

    del tools, api

    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        saved, cwd, tmp = _apply(req)
        try:
            answer = handle(req)
        except BaseException:  # noqa: BLE001 - every failure is an answer; the harness keeps serving
            answer = {"error": traceback.format_exc()[-8000:]}
        finally:
            _restore(saved, cwd, tmp)
        out.write(json.dumps({"nonce": nonce, "id": req.get("id"), "answer": answer}, default=str) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
