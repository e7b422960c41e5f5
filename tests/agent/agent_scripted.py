"""An in-process backend that replays a script of replies (for loop tests that need no HTTP).

The HTTP backends are tested against the fake API servers in ``fakes/``; this double stands in for
"some model" where the test is about the loop (budgets, cancel, routing, tampering), not transport.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from nki_agent.agent.protocol import BackendError, ModelReply, ModelRequest, ToolCall, Usage

Step = ModelReply | BackendError | Callable[[ModelRequest], ModelReply]


def call(tool: str, usage: Usage | None = None, text: str = "", **args: Any) -> ModelReply:
    return ModelReply(text, [ToolCall(f"c{id(args)}", tool, dict(args))], "tool_use", usage or Usage(10, 5), "scripted")


def say(text: str, usage: Usage | None = None) -> ModelReply:
    return ModelReply(text, [], "end_turn", usage or Usage(10, 5), "scripted")


class Scripted:
    """Replays ``steps`` in order (the last one repeats); records every request it saw."""

    def __init__(self, steps: list[Step], name: str = "scripted", model: str = "scripted-1"):
        self.steps = steps
        self.name = name
        self.model = model
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest) -> ModelReply:
        self.requests.append(dataclasses.replace(request, messages=list(request.messages)))  # as sent, not as grown
        step = self.steps[min(len(self.requests) - 1, len(self.steps) - 1)]
        if isinstance(step, BackendError):
            raise step
        if callable(step) and not isinstance(step, ModelReply):
            return step(request)
        return step
