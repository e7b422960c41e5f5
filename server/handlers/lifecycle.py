"""initialize / initialized / didChangeConfiguration: settings and workspace root.

Settings come from ``initializationOptions``; a client that sends none but supports
``workspace/configuration`` (VS Code, Neovim) is asked for the ``nkiAgent`` section once it is
``initialized``, and again whenever it signals a change without a payload. Each payload is validated
once (``settings.parse``); problems become ONE ``showMessage`` and the invalid fields take their
defaults. Nothing here can stop the server from starting.

Machine-scoped settings (``settings.MACHINE_SCOPED``: runner URL and token file, model backends, the
interpreter, trustLocal, compilerBackend) are taken from ``initializationOptions`` only — the client's own launch
configuration. ``didChangeConfiguration`` payloads and ``workspace/configuration`` answers can carry a
workspace's settings files (a cloned repository's ``.vscode/settings.json``), so their machine-scoped keys
are dropped (a differing value is logged) and the launch values stay; changing one means restarting the
server (the VS Code extension does). The workspace folders are kept too: tasks and the files sent to a
runner resolve only inside them.

The runner token arrives by ``nki/runnerToken`` (``runner_token.py``); the workspace folders change by
``workspace_folders.py``. A settings change that alters what results depend on (target, API generation,
runner) drops the results of the old settings and re-runs what was shown (``Scheduler.settings_changed``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from lsprotocol import types as T

from ...diagnostics.static import parallel
from ..documents import uri_to_path
from ..settings import DEFAULTS, MACHINE_SCOPED, SECTION, ServerSettings, parse, split_machine, with_machine

if TYPE_CHECKING:
    from ..app import NkiLanguageServer

log = logging.getLogger(__name__)
_pending_problems: dict[int, list[str]] = {}
_no_options: set[int] = set()  # servers whose client sent no initializationOptions: pull at initialized
_machine: dict[int, ServerSettings] = {}  # server -> the machine-scoped values of its initializationOptions


def _from_workspace(ls: NkiLanguageServer, raw: Any) -> tuple[ServerSettings, list[str]]:
    """Settings from a workspace-level payload: its machine-scoped keys are ignored (the launch values stay)."""
    machine = _machine.get(id(ls), DEFAULTS)
    kept, dropped = split_machine(raw)
    settings, problems = parse(kept)
    if dropped:
        section = raw.get(SECTION, raw) if isinstance(raw, dict) else {}
        aliases = {ServerSettings.model_fields[n].alias or n: n for n in MACHINE_SCOPED}
        differ = [k for k in dropped if isinstance(section, dict)
                  and section.get(k) != getattr(machine, aliases.get(k, k), None)]
        if differ:
            log.warning("ignored %s from the workspace configuration: machine-scoped settings are read only from "
                        "initializationOptions (restart the server to change them)",
                        ", ".join(f"{SECTION}.{k}" for k in differ))
    return with_machine(settings, machine), problems


def apply(ls: NkiLanguageServer, raw: Any, announce: bool = True, launch: bool = False) -> ServerSettings:
    """Apply a settings payload: ``launch`` for ``initializationOptions`` (every key), else a workspace-level
    payload (machine-scoped keys ignored)."""
    if launch:
        settings, problems = parse(raw)
        _machine[id(ls)] = settings
    else:
        settings, problems = _from_workspace(ls, raw)
    before = ls.session.settings
    dropped = ls.session.set_settings(settings)
    if problems:
        if announce:
            ls.window_show_message(T.ShowMessageParams(
                type=T.MessageType.Warning,
                message="NKI Agent: invalid settings, using defaults for: " + "; ".join(problems)))
        else:
            _pending_problems[id(ls)] = problems
    if announce and settings != before:
        ls.scheduler.settings_changed(dropped)  # re-check everything; re-run what another target's results showed
    return settings


async def _pull(ls: NkiLanguageServer) -> Any:
    """The client's ``nkiAgent`` section via ``workspace/configuration`` (None: not supported or failed)."""
    caps = ls.client_capabilities.workspace
    if caps is None or not caps.configuration:
        return None
    try:
        items = await ls.workspace_configuration_async(T.ConfigurationParams(items=[T.ConfigurationItem(section=SECTION)]))
    except Exception:
        log.exception("workspace/configuration failed")
        return None
    return items[0] if items else None


def register(ls: NkiLanguageServer) -> None:
    @ls.feature(T.INITIALIZE)
    def initialize(ls: NkiLanguageServer, params: T.InitializeParams) -> None:
        if params.workspace_folders:
            ls.session.root = uri_to_path(params.workspace_folders[0].uri)
            ls.session.roots = [uri_to_path(f.uri) for f in params.workspace_folders if f.uri.startswith("file:")]
        elif params.root_uri:
            ls.session.root = uri_to_path(params.root_uri)
        elif params.root_path:
            ls.session.root = params.root_path
        if not ls.session.roots and ls.session.root:
            ls.session.roots = [ls.session.root]
        if params.initialization_options in (None, {}):
            _no_options.add(id(ls))
        apply(ls, params.initialization_options, announce=False, launch=True)

    @ls.feature(T.INITIALIZED)
    async def initialized(ls: NkiLanguageServer, params: T.InitializedParams) -> None:
        parallel.enable()  # the helper process for cold checks of large files starts in the background
        problems = _pending_problems.pop(id(ls), None)
        if problems:
            ls.window_show_message(T.ShowMessageParams(
                type=T.MessageType.Warning,
                message="NKI Agent: invalid settings, using defaults for: " + "; ".join(problems)))
        if id(ls) in _no_options:
            _no_options.discard(id(ls))
            raw = await _pull(ls)
            if raw is not None:
                apply(ls, raw)
        ls.scheduler.mark_ready()  # the settings are known: saves that came in meanwhile run now

    @ls.feature(T.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: NkiLanguageServer, params: T.DidChangeConfigurationParams) -> None:
        raw = params.settings
        if raw is None or raw == {}:
            raw = await _pull(ls)
            if raw is None:
                return
        apply(ls, raw)

    @ls.feature(T.SHUTDOWN)
    def shutdown(ls: NkiLanguageServer, params: Any) -> None:
        from . import agent_fix

        agent_fix.cancel_all()
        parallel.disable()
        ls.scheduler.cancel_all()
