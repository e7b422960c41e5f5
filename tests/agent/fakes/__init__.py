"""Fake LLM API servers for tests (127.0.0.1 only): ``FakeAnthropic`` and ``FakeOpenAI``.

Script one reply per request (a list, consumed in order; a plain str is a ``Text``) or pass a
``handler(body) -> reply``. Replies: ``Text``, ``ToolUse([Call(name, args)])``, ``HttpError(status,
retry_after=...)``, ``Garbage()``, ``Stall()`` (hangs mid-stream until released; ``.stalled`` tells
when), ``CutOff(reply, after=N)``, ``StreamError(error_type)``. Every request is recorded in
``fake.requests`` (method, path, lower-cased headers, parsed JSON body).

From ``tests/agent``: ``from fakes import FakeAnthropic, Text``. From another test directory, put
``tests/agent`` on ``sys.path`` first (``sys.path.insert(0, str(ROOT / "tests" / "agent"))``).
"""

from ._server import (
                      Call,
                      CutOff,
                      FakeServer,
                      FakeUsage,
                      Garbage,
                      HttpError,
                      RecordedRequest,
                      Reply,
                      Stall,
                      StreamError,
                      Text,
                      ToolUse,
)
from .fake_anthropic import FakeAnthropic
from .fake_openai import FakeOpenAI

__all__ = ["Call", "CutOff", "FakeAnthropic", "FakeOpenAI", "FakeServer", "FakeUsage", "Garbage", "HttpError",
           "RecordedRequest", "Reply", "Stall", "StreamError", "Text", "ToolUse"]
