"""Reading a runner bearer token from a file: the one reader the CLI and the language server share.

A token file holds the token on its first non-empty line (surrounding whitespace ignored; at most the
first 64 KiB are read, so a wrong path to a huge file costs nothing). A missing, unreadable, binary or
empty file is a ``TokenFileError`` naming the file and the reason — never the token.
"""

from __future__ import annotations

MAX_BYTES = 64 * 1024


class TokenFileError(ValueError):
    """The token file cannot be used (the message names the file and why, never its content)."""


def read_token_file(path: str) -> str:
    """The token in ``path``: its first non-empty line, stripped."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = [ln.strip() for ln in fh.read(MAX_BYTES).splitlines() if ln.strip()]
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise TokenFileError(f"cannot read {path}: {reason}") from None
    if not lines:
        raise TokenFileError(f"{path} is empty")
    return lines[0]
