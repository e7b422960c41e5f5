"""initialize / initialized / didChangeConfiguration: settings and workspace root.

Settings are validated once per payload (``settings.parse``); problems become ONE ``showMessage``
and the invalid fields take their defaults. Nothing here can stop the server from starting.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from lsprotocol import types as T

from ..documents import uri_to_path
from ..settings import SECTION, ServerSettings, parse

if TYPE_CHECKING:
    from ..app import NkiLanguageServer

log = logging.getLogger(__name__)
_pending_problems: dict[int, list[str]] = {}


def apply(ls: NkiLanguageServer, raw: Any, announce: bool = True) -> ServerSettings:
    settings, problems = parse(raw)
    before = ls.state.settings
    ls.state.settings = settings
    if problems:
        if announce:
            ls.window_show_message(T.ShowMessageParams(
                type=T.MessageType.Warning,
                message="NKI Agent: invalid settings, using defaults for: " + "; ".join(problems)))
        else:
            _pending_problems[id(ls)] = problems
    if announce and settings != before:
        for uri in ls.state.store.uris():
            snap = ls.state.store.get(uri)
            if snap is not None:
                ls.state.schedule_static(snap, 0)
    return settings


def register(ls: NkiLanguageServer) -> None:
    @ls.feature(T.INITIALIZE)
    def initialize(ls: NkiLanguageServer, params: T.InitializeParams) -> None:
        if params.workspace_folders:
            ls.state.root = uri_to_path(params.workspace_folders[0].uri)
        elif params.root_uri:
            ls.state.root = uri_to_path(params.root_uri)
        elif params.root_path:
            ls.state.root = params.root_path
        apply(ls, params.initialization_options, announce=False)

    @ls.feature(T.INITIALIZED)
    def initialized(ls: NkiLanguageServer, params: T.InitializedParams) -> None:
        problems = _pending_problems.pop(id(ls), None)
        if problems:
            ls.window_show_message(T.ShowMessageParams(
                type=T.MessageType.Warning,
                message="NKI Agent: invalid settings, using defaults for: " + "; ".join(problems)))

    @ls.feature(T.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: NkiLanguageServer, params: T.DidChangeConfigurationParams) -> None:
        raw = params.settings
        caps = ls.client_capabilities.workspace
        if (raw is None or raw == {}) and caps is not None and caps.configuration:
            try:
                items = await ls.workspace_configuration_async(
                    T.ConfigurationParams(items=[T.ConfigurationItem(section=SECTION)]))
                raw = items[0] if items else None
            except Exception:  # the client could not answer: keep the current settings
                log.exception("workspace/configuration failed")
                return
        apply(ls, raw)

    @ls.feature(T.SHUTDOWN)
    def shutdown(ls: NkiLanguageServer, params: Any) -> None:
        for st in ls.state.docs.values():
            if st.pending is not None:
                st.pending.cancel()
