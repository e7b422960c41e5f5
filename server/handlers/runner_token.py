"""``nki/runnerToken`` (a notification of the VS Code extension): the runner token is a secret, never a setting.

``{"value": TOKEN}`` (when the token in the extension's secret storage changes; ``""``: none) sets
``NKI_AGENT_RUNNER_TOKEN`` in the server's environment — where a restart would have put it — and the next
runner job uses it (``remote.Remote.client``). The value is never logged.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from ...runner.config import TOKEN_ENV

if TYPE_CHECKING:
    from ..app import NkiLanguageServer

log = logging.getLogger(__name__)
RUNNER_TOKEN = "nki/runnerToken"


def register(ls: NkiLanguageServer) -> None:
    @ls.feature(RUNNER_TOKEN)
    def runner_token(ls: NkiLanguageServer, params: Any) -> None:
        value = params.get("value") if isinstance(params, dict) else getattr(params, "value", None)
        if isinstance(value, str) and value.strip():
            os.environ[TOKEN_ENV] = value.strip()
        else:
            os.environ.pop(TOKEN_ENV, None)
        log.info("%s %s by the client", TOKEN_ENV, "set" if TOKEN_ENV in os.environ else "removed")
