"""workspace/didChangeWorkspaceFolders: the folders tasks and the files sent to a runner must lie in."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types as T

from ..documents import uri_to_path

if TYPE_CHECKING:
    from ..app import NkiLanguageServer


def register(ls: NkiLanguageServer) -> None:
    @ls.feature(T.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    def folders_changed(ls: NkiLanguageServer, params: T.DidChangeWorkspaceFoldersParams) -> None:
        removed = {uri_to_path(f.uri) for f in params.event.removed}
        roots = [r for r in ls.session.roots if r not in removed]
        roots += [uri_to_path(f.uri) for f in params.event.added if f.uri.startswith("file:")]
        ls.session.roots = list(dict.fromkeys(roots))
