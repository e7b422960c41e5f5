"""Machine-scoped settings and workspace containment, as units (issue 20; end to end: test_workspace_trust_lsp.py).

- every setting that decides where files and keys go or what runs is ``"scope": "machine"`` in package.json
  and restricted in untrusted workspaces (a new setting named like a URL, a file, a backend or an
  interpreter fails here until it is classified);
- a workspace-level payload cannot change them (``split_machine`` / ``with_machine``);
- ``task_discovery.inside`` resolves symlinks; ``analysis.outside_files`` names what a runner bundle would
  carry from outside the workspace.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nki_agent.server.analysis import outside_files
from nki_agent.server.settings import (
    DEFAULTS,
    MACHINE_SCOPED,
    ServerSettings,
    machine_aliases,
    parse,
    split_machine,
    with_machine,
)
from nki_agent.toolchain.task_discovery import discover, inside, outside_task

ROOT = Path(__file__).resolve().parents[2]
SENSITIVE = ["runnerUrl", "runnerTokenFile", "interpreter", "modelBackend", "trustLocal"]
# words that make a setting decide where something goes, what is read, or what runs
RISKY_WORDS = ("url", "file", "path", "token", "key", "backend", "interpreter", "command", "trust", "python")


def _package() -> dict:
    return json.loads((ROOT / "package.json").read_text())


@pytest.mark.parametrize("key", SENSITIVE)
def test_sensitive_setting_is_machine_scoped_and_restricted(key: str) -> None:
    pkg = _package()
    entry = pkg["contributes"]["configuration"]["properties"][f"nkiAgent.{key}"]
    assert entry.get("scope") == "machine", key
    untrusted = pkg["capabilities"]["untrustedWorkspaces"]
    assert untrusted["supported"] == "limited"
    assert f"nkiAgent.{key}" in untrusted["restrictedConfigurations"]


def test_every_setting_is_classified() -> None:
    """Machine-scoped in the schema ⇔ in package.json; a setting named like a risky one must be machine-scoped."""
    props = _package()["contributes"]["configuration"]["properties"]
    scoped = sorted(k.removeprefix("nkiAgent.") for k, v in props.items() if v.get("scope") == "machine")
    assert scoped == machine_aliases()
    assert sorted(_package()["capabilities"]["untrustedWorkspaces"]["restrictedConfigurations"]) == \
        [f"nkiAgent.{a}" for a in machine_aliases()]
    for name, field in ServerSettings.model_fields.items():
        alias = (field.alias or name).lower()
        if any(w in alias for w in RISKY_WORDS):
            assert name in MACHINE_SCOPED, f"{field.alias}: classify it (machine-scoped, or not risky: extend the test)"


HOSTILE = {"runnerUrl": "http://attacker.example:8765", "runnerTokenFile": "/home/you/.ssh/id_rsa",
           "modelBackend": "openai:m@http://attacker.example/v1", "trustLocal": True, "interpreter": "/evil",
           "target": "trn2"}


@pytest.mark.parametrize("shape", ["section", "flat", "snake"])
def test_workspace_payload_cannot_change_machine_settings(shape: str) -> None:
    launch, problems = parse({"nkiAgent": {"runnerUrl": "http://mine:8765", "modelBackend": "rules"}})
    assert not problems
    raw: dict = {"nkiAgent": dict(HOSTILE)} if shape == "section" else dict(HOSTILE)
    if shape == "snake":
        raw = {"runner_url": HOSTILE["runnerUrl"], "runner_token_file": HOSTILE["runnerTokenFile"], "target": "trn2"}
    kept, dropped = split_machine(raw)
    assert dropped
    settings, problems = parse(kept)
    merged = with_machine(settings, launch)
    assert merged.runner_url == "http://mine:8765" and merged.model_backend == "rules"
    assert merged.runner_token_file == DEFAULTS.runner_token_file and merged.trust_local is False
    assert merged.target == "trn2"  # ordinary settings still come from the workspace


def test_inside_resolves_symlinks(tmp_path: Path) -> None:
    ws, out = tmp_path / "ws", tmp_path / "out"
    ws.mkdir()
    out.mkdir()
    (out / "t.py").write_text("def get_inputs():\n    return []\n")
    (ws / "link.py").symlink_to(out / "t.py")
    (ws / "dirlink").symlink_to(out, target_is_directory=True)
    (ws / "real.py").write_text("")
    assert inside(str(ws / "real.py"), [str(ws)])
    assert not inside(str(ws / "link.py"), [str(ws)])
    assert not inside(str(ws / "dirlink" / "t.py"), [str(ws)])
    assert not inside(str(tmp_path / "ws2" / "x.py"), [str(ws)])  # a sibling folder sharing the prefix
    kernel = ws / "k.py"
    assert discover(str(kernel), "# nki-task: link.py\n", {}, str(ws), [str(ws)]) is None
    assert discover(str(kernel), "# nki-task: link.py\n", {}, str(ws)) is not None  # no roots: the CLI's rule
    found = outside_task(str(kernel), "# nki-task: link.py\n", {}, str(ws), [str(ws)])
    assert found is not None and found.how == "comment" and found.line == 1 and found.column == len("# nki-task: ") + 1


def test_runner_bundle_withholds_modules_outside_the_workspace(tmp_path: Path) -> None:
    ws, out, copy = tmp_path / "ws", tmp_path / "out", tmp_path / "copy"
    for d in (ws, out, copy):
        d.mkdir()
    (out / "secret.py").write_text("SECRET = 1\n")
    (ws / "helper.py").symlink_to(out / "secret.py")
    (ws / "util.py").write_text("X = 1\n")
    (ws / "task.py").write_text("import util\ndef get_inputs():\n    return []\n")
    kernel = copy / "k.py"  # the server's private copy of the buffer
    kernel.write_text("import helper\nimport util\n")
    withheld = outside_files(str(kernel), str(ws / "task.py"), [str(ws)], [str(ws)])
    assert withheld == [str(ws / "helper.py")]
