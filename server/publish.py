"""Publishing diagnostics: the union of the tiers computed for a document's current revision (and current
settings), de-duplicated across the local tiers, with the user's suppressions and severities applied,
converted to LSP once and sent with the document's version.

``current_diagnostics`` is the one view of "what is shown" that hovers and code actions read too.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lsprotocol import types as T

from ..diagnostics import suppress
from ..diagnostics.model import Diagnostic, dedupe
from ..toolchain.facts.errors import doc_url
from ..toolchain.task_discovery import OutsideTask, missing_task
from . import analysis
from .convert import file_uri, to_lsp_diagnostic
from .documents import Snapshot, uri_to_path
from .session import Session

if TYPE_CHECKING:
    from .app import NkiLanguageServer


def missing_task_diagnostic(snap: Snapshot) -> Diagnostic | None:
    """A ``# nki-task:`` comment naming a file that is not there: say which path was looked for."""
    if snap.too_large:
        return None
    m = missing_task(snap.path, snap.text)
    if m is None:
        return None
    return Diagnostic("sim_task_not_found", "warning",
                      f"`# nki-task:` names `{m.written}`, which does not exist (looked for {m.looked_for}); "
                      "saving cannot simulate or verify against it", snap.path, m.line, m.column, m.line,
                      m.column + len(m.written), "nki-agent", doc_url("sim_task_not_found"))


def outside_task_diagnostic(snap: Snapshot, out: OutsideTask | None) -> Diagnostic | None:
    """A ``# nki-task:`` comment naming a file outside the workspace folders: ignored, and said so at the path."""
    if out is None or out.how != "comment":
        return None
    return Diagnostic("sim_task_not_found", "warning",
                      f"`# nki-task:` names `{out.written}`, which is outside the workspace folders ({out.real}); "
                      "it is ignored: tasks are read only inside the workspace", snap.path, out.line, out.column,
                      out.line, out.column + len(out.written), "nki-agent", doc_url("sim_task_not_found"))


class Publisher:
    def __init__(self, server: NkiLanguageServer, session: Session) -> None:
        self.server = server
        self.session = session
        self._published: dict[str, tuple[int, list[T.Diagnostic]]] = {}  # uri -> the last publish (version, diags)

    def current_diagnostics(self, uri: str) -> tuple[Snapshot | None, list[tuple[str, int, Any]]]:
        """(snapshot, [(tier, index, model diagnostic)]) computed for the current revision and settings."""
        session = self.session
        snap = session.store.get(uri)
        st = session.docs.get(uri)
        if snap is None or st is None:
            return snap, []
        out: list[tuple[str, int, Any]] = []
        if st.static is not None and st.static.revision == snap.revision and st.static_key == session.key:
            out.extend(("static", k, d) for k, d in enumerate(st.static.diagnostics))
        for kind, run in st.runs.items():
            if run.revision == snap.revision and run.key == session.key:
                out.extend((kind, k, d) for k, d in enumerate(run.diagnostics))
        # the task comment's path is checked on the loop: one stat of a file the comment names
        missing = missing_task_diagnostic(snap) or outside_task_diagnostic(snap, session.outside_of(snap))
        if missing is not None:
            out.append(("task", 0, missing))
        local, remote = st.runs.get("verify"), st.runs.get("remote")
        if local is not None and remote is not None and local.revision == remote.revision == snap.revision:
            differ = analysis.disagreement(local, remote, snap, remote.result.runner)
            if differ is not None:
                out.append(("remote", len(remote.diagnostics), differ))
        # the local tiers (static, simulate, verify) publish one diagnostic per problem; the runner's own stay
        # (another machine's verdict, source nki-runner)
        local_tiers = dedupe([t for t in out if t[0] != "remote"])
        # what the user hid (`# nki: ignore[...]`) or re-graded (nkiAgent.severity), every tier at once
        return snap, suppress.apply_tagged(local_tiers + [t for t in out if t[0] == "remote"], snap.text, snap.path,
                                           session.settings.severity)

    def lsp_diagnostics(self, uri: str) -> tuple[Snapshot | None, list[T.Diagnostic]]:
        snap, diags = self.current_diagnostics(uri)
        if snap is None:
            return None, []
        lines = snap.text.split("\n")
        to_uri: Callable[[str], str | None] = lambda p: path_to_uri(uri, p)
        return snap, [to_lsp_diagnostic(d, lines, uri, to_uri, {"tier": tier, "index": k, "revision": snap.revision})
                      for tier, k, d in diags]

    def publish(self, uri: str, only_if_changed: bool = False) -> None:
        snap, diags = self.lsp_diagnostics(uri)
        if snap is None:
            return
        last = (snap.version, diags)
        if only_if_changed and self._published.get(uri) == last:
            return
        self._published[uri] = last
        self.server.text_document_publish_diagnostics(
            T.PublishDiagnosticsParams(uri=uri, diagnostics=diags, version=snap.version))
        self.session.stats.published += 1

    def clear(self, uri: str) -> None:
        self._published.pop(uri, None)
        self.server.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


def path_to_uri(uri: str, path: str) -> str | None:
    if not path:
        return uri
    if os.path.abspath(path) == os.path.abspath(uri_to_path(uri)):
        return uri
    return file_uri(os.path.abspath(path))
