"""The one token-file reader (CLI and language server): first non-empty line; clear errors that never
carry the file's content."""

from __future__ import annotations

from pathlib import Path

import pytest
from nki_agent.runner.token_file import MAX_BYTES, TokenFileError, read_token_file
from nki_agent.server.remote import read_token as server_read_token

SECRET = "s3cr3t-token-abcdef0123456789"


@pytest.mark.parametrize("content,expected", [
    (f"{SECRET}\n", SECRET),
    (f"\n\n   {SECRET}  \nsecond-line\n", SECRET),
    (f"{SECRET}", SECRET),
])
def test_first_non_empty_line(tmp_path: Path, content: str, expected: str) -> None:
    f = tmp_path / "token"
    f.write_text(content)
    assert read_token_file(str(f)) == expected
    assert server_read_token(str(f)) == expected


@pytest.mark.parametrize("case", ["missing", "empty", "blank", "binary", "directory", "huge_blank_start"])
def test_unusable_files_are_clear_errors_without_content(tmp_path: Path, case: str) -> None:
    f = tmp_path / "token"
    if case == "empty":
        f.write_text("")
    elif case == "blank":
        f.write_text("  \n\t\n")
    elif case == "binary":
        f.write_bytes(b"\xff\xfe" + SECRET.encode() + b"\x00\x81")
    elif case == "directory":
        f.mkdir()
    elif case == "huge_blank_start":  # the token sits past the bytes read: treated as empty, not read whole
        f.write_text(" " * (MAX_BYTES + 10) + "\n" + SECRET)
    with pytest.raises(TokenFileError) as err:
        read_token_file(str(f))
    assert str(f) in str(err.value) and SECRET not in str(err.value)
    assert server_read_token(str(f)) is None  # the server logs it; the runner then answers "missing token"
    assert server_read_token("") is None
