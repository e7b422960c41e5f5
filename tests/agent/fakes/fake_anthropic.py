"""A fake Anthropic Messages API (``POST /v1/messages``) on 127.0.0.1 for tests.

Renders scripted replies as the real API does: a ``message`` JSON object, or with ``"stream": true``
the SSE sequence ``message_start``, ``content_block_start``, ``ping``, ``content_block_delta``
(``text_delta`` / ``input_json_delta``), ``content_block_stop``, ``message_delta``, ``message_stop``
(every event an ``event:`` line and a ``data:`` line repeating ``"type"``). Errors use the API's
``{"type": "error", "error": {...}}`` shape. The SDK authenticates with ``x-api-key`` or a Bearer
token; ``require_key`` accepts either.

    with FakeAnthropic([ToolUse([Call("compile", {"path": "k.py"})]), Text("done")]) as fake:
        backend = AnthropicBackend(api_key="test", base_url=fake.base_url)
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

ERROR_TYPES = {  # status -> the API's error.type
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
    500: "api_error", 529: "overloaded_error",
}
TEXT_CHUNK = 8  # characters per text_delta
JSON_CHUNK = 7  # characters per input_json_delta (the real API splits tool input at arbitrary points)


def _usage(u: FakeUsage) -> dict[str, Any]:
    return {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
            "cache_creation_input_tokens": u.cache_write_tokens, "cache_read_input_tokens": u.cache_read_tokens}


class FakeAnthropic(FakeServer):
    """Scripted fake of the Messages API; see the module docstring and ``_server`` for replies."""

    paths = ("/v1/messages",)

    # content ----------------------------------------------------------------------------------
    def _blocks(self, reply: Text | ToolUse) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if reply.text:
            blocks.append({"type": "text", "text": reply.text})
        if isinstance(reply, ToolUse):
            for c in reply.calls:
                blocks.append({"type": "tool_use", "id": c.id or self.next_id("toolu_fake_"), "name": c.name,
                               "input": c.arguments if isinstance(c.arguments, dict) else _loose(c.arguments)})
        return blocks

    def _stop(self, reply: Text | ToolUse) -> str:
        return reply.stop_reason or ("tool_use" if isinstance(reply, ToolUse) else "end_turn")

    def _message(self, content: list[dict[str, Any]], stop: str | None, usage: dict[str, Any]) -> dict[str, Any]:
        return {"id": self.next_id("msg_fake_"), "type": "message", "role": "assistant", "model": self.model,
                "content": content, "stop_reason": stop, "stop_sequence": None, "usage": usage}

    # events -----------------------------------------------------------------------------------
    def _events(self, reply: Text | ToolUse, raw_args: dict[int, str]) -> list[dict[str, Any]]:
        start_usage = _usage(reply.usage) | {"output_tokens": 1}
        events: list[dict[str, Any]] = [{"type": "message_start", "message": self._message([], None, start_usage)}]
        for i, block in enumerate(self._blocks(reply)):
            if block["type"] == "text":
                events.append({"type": "content_block_start", "index": i,
                               "content_block": {"type": "text", "text": ""}})
                if i == 0:
                    events.append({"type": "ping"})
                events += [{"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": t}}
                           for t in chunks(block["text"], TEXT_CHUNK)]
            else:
                events.append({"type": "content_block_start", "index": i,
                               "content_block": dict(block, input={})})
                text = raw_args.get(i, json.dumps(block["input"]))
                events.append({"type": "content_block_delta", "index": i,
                               "delta": {"type": "input_json_delta", "partial_json": ""}})
                events += [{"type": "content_block_delta", "index": i,
                            "delta": {"type": "input_json_delta", "partial_json": t}}
                           for t in chunks(text, JSON_CHUNK)]
            events.append({"type": "content_block_stop", "index": i})
        events.append({"type": "message_delta", "delta": {"stop_reason": self._stop(reply), "stop_sequence": None},
                       "usage": {"output_tokens": reply.usage.output_tokens}})
        events.append({"type": "message_stop"})
        return events

    def _raw_args(self, reply: Text | ToolUse) -> dict[int, str]:
        """Block index -> tool input sent verbatim (a str ``Call.arguments``)."""
        if not isinstance(reply, ToolUse):
            return {}
        first = 1 if reply.text else 0
        return {first + n: c.arguments for n, c in enumerate(reply.calls) if isinstance(c.arguments, str)}

    @staticmethod
    def _sse(event: dict[str, Any]) -> bytes:
        return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()

    # rendering ----------------------------------------------------------------------------------
    def render(self, out: Responder, reply: Text | ToolUse | CutOff | StreamError, body: dict[str, Any],
               stream: bool) -> None:
        if isinstance(reply, StreamError):
            events = self._events(Text(reply.text), {})[:4]
            events.append({"type": "error", "error": {"type": reply.error_type, "message": reply.message}})
            out.start_stream()
            for e in events:
                out.chunk(self._sse(e))
            out.end_stream()
            return
        turn = reply.reply if isinstance(reply, CutOff) else reply
        if not stream:
            msg = self._message(self._blocks(turn), self._stop(turn), _usage(turn.usage))
            out.send(200, json.dumps(msg).encode(), truncate=isinstance(reply, CutOff))
            return
        events = self._events(turn, self._raw_args(turn))
        out.start_stream({"request-id": self.next_id("req_fake_")})
        for n, e in enumerate(events):
            if isinstance(reply, CutOff) and n == reply.after:
                out.drop()
            out.chunk(self._sse(e))
        out.end_stream()

    def render_error(self, out: Responder, err: HttpError) -> None:
        headers = dict(err.headers)
        if err.retry_after is not None:
            headers["retry-after"] = err.retry_after
        if err.body is None:
            body: Any = {"type": "error", "error": {"type": ERROR_TYPES.get(err.status, "api_error"),
                                                    "message": err.message}}
        else:
            body = err.body
        data = body if isinstance(body, bytes) else (body.encode() if isinstance(body, str) else json.dumps(body).encode())
        out.send(err.status, data, headers=headers)

    def render_stall(self, out: Responder, stall: Stall, body: dict[str, Any], stream: bool) -> None:
        if stream:
            out.start_stream()
            start = self._events(Text(""), {})[0]
            for e in (start, {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                      {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": stall.text}}):
                out.chunk(self._sse(e))
        self._stall_wait(out, stall)


def _loose(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


__all__ = ["Call", "CutOff", "FakeAnthropic", "HttpError", "Stall", "StreamError", "Text", "ToolUse"]
