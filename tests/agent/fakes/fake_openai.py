"""A fake OpenAI-compatible chat-completions API (``POST /v1/chat/completions``) on 127.0.0.1.

Renders scripted replies like OpenAI / vLLM: a ``chat.completion`` JSON object, or with
``"stream": true`` ``data: {chunk}`` lines (a role chunk, ``delta.content`` pieces, ``delta.tool_calls``
by index: id + name first, then argument pieces; a chunk with ``finish_reason``; when the request set
``stream_options.include_usage``, every chunk carries ``"usage": null`` and a last chunk with
``choices: []`` carries the usage) and ``data: [DONE]``. ``base_url`` ends in ``/v1`` as the SDK
expects.

    with FakeOpenAI([ToolUse([Call("compile", {"path": "k.py"})]), Text("done")]) as fake:
        backend = OpenAIBackend(model="my-model", base_url=fake.base_url)
"""

from __future__ import annotations

import json
from typing import Any

from ._server import (
    Call,
    CutOff,
    FakeServer,
    FakeUsage,
    HttpError,
    Responder,
    Stall,
    StreamError,
    Text,
    ToolUse,
    chunks,
)

ERROR_TYPES = {  # status -> OpenAI's error.type
    400: "invalid_request_error", 401: "invalid_request_error", 403: "permission_error",
    404: "invalid_request_error", 429: "rate_limit_exceeded", 500: "server_error", 503: "server_error",
}
TEXT_CHUNK = 6  # characters per content delta
ARGS_CHUNK = 9  # characters per tool-call arguments delta


def _usage(u: FakeUsage) -> dict[str, Any]:
    prompt = u.input_tokens + u.cache_read_tokens  # OpenAI counts cached tokens inside prompt_tokens
    return {"prompt_tokens": prompt, "completion_tokens": u.output_tokens,
            "total_tokens": prompt + u.output_tokens, "prompt_tokens_details": {"cached_tokens": u.cache_read_tokens}}


class FakeOpenAI(FakeServer):
    """Scripted fake of chat completions; see the module docstring and ``_server`` for replies."""

    paths = ("/chat/completions",)
    api_prefix = "/v1"

    def _calls(self, reply: Text | ToolUse) -> list[dict[str, Any]]:
        if not isinstance(reply, ToolUse):
            return []
        return [{"id": c.id or self.next_id("call_fake_"), "type": "function",
                 "function": {"name": c.name, "arguments": _args(c)}} for c in reply.calls]

    def _finish(self, reply: Text | ToolUse) -> str:
        return reply.stop_reason or ("tool_calls" if isinstance(reply, ToolUse) else "stop")

    def _chunk(self, cid: str, delta: dict[str, Any] | None, finish: str | None = None,
               with_usage: bool = False) -> dict[str, Any]:
        chunk: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": 1700000000,
                                 "model": self.model, "system_fingerprint": None,
                                 "choices": [] if delta is None else
                                 [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if with_usage:
            chunk["usage"] = None
        return chunk

    def _chunks(self, reply: Text | ToolUse, include_usage: bool) -> list[dict[str, Any]]:
        cid = self.next_id("chatcmpl-fake")
        out = [self._chunk(cid, {"role": "assistant", "content": ""}, with_usage=include_usage)]
        out += [self._chunk(cid, {"content": t}, with_usage=include_usage) for t in chunks(reply.text, TEXT_CHUNK)]
        for i, call in enumerate(self._calls(reply)):
            fn = call["function"]
            out.append(self._chunk(cid, {"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                                         "function": {"name": fn["name"], "arguments": ""}}]},
                                   with_usage=include_usage))
            out += [self._chunk(cid, {"tool_calls": [{"index": i, "function": {"arguments": a}}]},
                                with_usage=include_usage) for a in chunks(fn["arguments"], ARGS_CHUNK)]
        out.append(self._chunk(cid, {}, self._finish(reply), with_usage=include_usage))
        if include_usage:
            last = self._chunk(cid, None)
            last["usage"] = _usage(reply.usage)
            out.append(last)
        return out

    @staticmethod
    def _sse(obj: Any) -> bytes:
        return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"

    def render(self, out: Responder, reply: Text | ToolUse | CutOff | StreamError, body: dict[str, Any],
               stream: bool) -> None:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if isinstance(reply, StreamError):
            out.start_stream()
            for c in self._chunks(Text(reply.text), include_usage)[:2]:
                out.chunk(self._sse(c))
            out.chunk(self._sse({"error": {"message": reply.message, "type": reply.error_type, "code": None}}))
            out.end_stream()
            return
        turn = reply.reply if isinstance(reply, CutOff) else reply
        if not stream:
            calls = self._calls(turn)
            message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
            if calls:
                message["tool_calls"] = calls
            completion = {"id": self.next_id("chatcmpl-fake"), "object": "chat.completion", "created": 1700000000,
                          "model": self.model, "choices": [{"index": 0, "message": message, "logprobs": None,
                                                            "finish_reason": self._finish(turn)}],
                          "usage": _usage(turn.usage)}
            out.send(200, json.dumps(completion).encode(), truncate=isinstance(reply, CutOff))
            return
        out.start_stream()
        for n, c in enumerate(self._chunks(turn, include_usage)):
            if isinstance(reply, CutOff) and n == reply.after:
                out.drop()
            out.chunk(self._sse(c))
        out.chunk(self._sse(b"[DONE]"))
        out.end_stream()

    def render_error(self, out: Responder, err: HttpError) -> None:
        headers = dict(err.headers)
        if err.retry_after is not None:
            headers["retry-after"] = err.retry_after
        if err.body is None:
            body: Any = {"error": {"message": err.message, "type": ERROR_TYPES.get(err.status, "server_error"),
                                   "param": None, "code": None}}
        else:
            body = err.body
        data = body if isinstance(body, bytes) else (body.encode() if isinstance(body, str) else json.dumps(body).encode())
        out.send(err.status, data, headers=headers)

    def render_stall(self, out: Responder, stall: Stall, body: dict[str, Any], stream: bool) -> None:
        if stream:
            out.start_stream()
            cid = self.next_id("chatcmpl-fake")
            for delta in ({"role": "assistant", "content": ""}, {"content": stall.text}):
                out.chunk(self._sse(self._chunk(cid, delta)))
        self._stall_wait(out, stall)


def _args(call: Call) -> str:
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)


__all__ = ["Call", "CutOff", "FakeOpenAI", "HttpError", "Stall", "StreamError", "Text", "ToolUse"]
