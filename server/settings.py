"""The server's settings: one typed schema, validated once per change, never fatal.

The same model is the source of the VS Code ``contributes.configuration`` block in ``package.json``
(``contributes_configuration()``; ``python -m nki_agent.server.settings`` prints it, a test keeps the
two in sync). Settings arrive in ``initializationOptions`` and ``workspace/didChangeConfiguration``,
either flat or under the ``nkiAgent`` section. Invalid values are dropped field by field (the rest
is kept), and the caller shows ONE message listing them; a bad setting never stops the server.

Machine-scoped settings (``MACHINE_SCOPED``: where files and keys go, what runs — ``runnerUrl``,
``runnerTokenFile``, ``modelBackend``, ``interpreter``, ``trustLocal``, ``compilerBackend``) are ``"scope": "machine"`` in
VS Code, so a workspace's ``.vscode/settings.json`` cannot set them, and listed as restricted for
untrusted workspaces. The server takes them only from ``initializationOptions`` (the client's own launch
configuration); in ``workspace/didChangeConfiguration`` payloads and ``workspace/configuration`` answers,
which may merge workspace-level files, they are ignored (``split_machine``) and the launch values stay.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from ..diagnostics.suppress import Level

SECTION = "nkiAgent"
_MACHINE: dict[str, Any] = {"scope": "machine"}  # json_schema_extra of a machine-scoped field


class ServerSettings(BaseModel):
    """Every user-facing setting, with its default."""

    model_config = ConfigDict(strict=True, extra="ignore", alias_generator=to_camel, populate_by_name=True,
                              frozen=True)

    target: Literal["auto", "trn1", "trn2", "trn3"] = Field(
        "auto", description="Trainium generation to check and simulate for (auto: the task's TARGET, else the "
                            "API generation's default: trn1 for classic kernels, trn3 for new ones).")
    api_generation: Literal["auto", "classic", "new"] = Field(
        "auto", description="NKI API generation your SDK accepts (new: NKI >= 0.4 rejects classic kernels).")
    runner_url: str = Field("", json_schema_extra=_MACHINE, description="URL of a remote runner (nki-agent runner serve on a Trainium host) for "
                                        "verifyOnSave \"remote\" and the Verify command; its token comes from "
                                        "runnerTokenFile or NKI_AGENT_RUNNER_TOKEN in the server's environment.")
    runner_token_file: str = Field("", json_schema_extra=_MACHINE, description="File holding the remote runner's bearer token (first line).")
    model_backend: str = Field(
        "rules", json_schema_extra=_MACHINE, description="Backends of the fix agent, cheapest first (comma-separated; the router escalates "
                             "along the chain): rules (offline quick fixes), anthropic[:MODEL] (Claude; needs "
                             "ANTHROPIC_API_KEY in the server's environment), openai:MODEL@URL (an OpenAI-compatible "
                             "server such as vLLM).")
    agent_max_turns: int = Field(10, ge=1, le=50, description="Model turns the fix agent may take per run.")
    agent_max_dollars: float = Field(5.0, ge=0.0, le=1000.0, description="Spend limit of one fix-agent run in US$ "
                                                                       "(0: none).")
    compiler_backend: Literal["embedded"] = Field(
        "embedded", json_schema_extra=_MACHINE, description="Toolchain used for simulation and verification: the embedded NKI simulator.")
    trust_local: bool = Field(False, json_schema_extra=_MACHINE, description="Apply agent fixes verified without the OS sandbox (on machines "
                                                 "where Linux namespaces are unavailable). Off: such fixes are shown, "
                                                 "not applied.")
    verify_on_save: Literal["off", "local", "remote"] = Field(
        "off", description="Verify the kernel against its task (all seeds) on every save: off, local (the embedded "
                           "simulator, in the OS sandbox), or remote (the runner at runnerUrl: correctness on its "
                           "backend plus measured latency; the local simulation still runs for hovers).")
    simulate_on_save: bool = Field(True, description="Simulate the kernel on its task's inputs on every save.")
    simulation_timeout: float = Field(60.0, ge=1.0, le=3600.0, description="Seconds a simulation or verification "
                                      "on save may run before the sandbox stops it (and says so).")
    cost_hints: bool = Field(True, description="Inlay hints at loop headers with the cost model's estimate from the "
                                               "last run: the loop's share of the estimated time and what bounds "
                                               "it. Estimated, never measured.")
    # 20 ms: a re-check after an edit costs 2-4 ms, so this only coalesces a burst of keystrokes; it applies only
    # while the document's checks take longer than the pause between keystrokes (``scheduler.static_delay``)
    debounce_ms: int = Field(20, ge=0, le=5000, description="Delay after the last keystroke before static checks run.")
    interpreter: str = Field("", json_schema_extra=_MACHINE, description="Python interpreter that runs the language server (VS Code "
                                             "extension; empty: the Python extension's environment, else python3 "
                                             "on PATH). The server itself ignores it.")
    severity: dict[str, Level] = Field(
        default_factory=dict, description="Severity per diagnostic code: error, warning, information, hint, or off "
                                          "(not shown), e.g. {\"err_unsupported_memory\": \"warning\"}; the CLI "
                                          "reads the same table from [tool.nki-agent] severity in pyproject.toml.")
    task_map: dict[str, str] = Field(
        default_factory=dict, description="Kernel glob -> task file (paths relative to the workspace root), "
                                          "e.g. {\"kernels/*.py\": \"tasks/my_task.py\"}.")

    @field_validator("model_backend")
    @classmethod
    def _chain(cls, v: str) -> str:
        from ..agent.backends import SpecError, parse_chain

        try:
            parse_chain(v)
        except SpecError as e:
            raise ValueError(str(e)) from None
        return v

    @field_validator("verify_on_save", mode="before")
    @classmethod
    def _legacy_bool(cls, v: Any) -> Any:
        if isinstance(v, bool):  # the setting was a boolean before the remote runner
            return "local" if v else "off"
        return v

    @field_validator("runner_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if v and not v.startswith(("http://", "https://")):
            raise ValueError("must be an http(s) URL or empty")
        return v


DEFAULTS = ServerSettings.model_validate({})


def analysis_key(settings: ServerSettings) -> tuple[str, ...]:
    """What every result depends on: target, API generation, toolchain and runner. A result computed under
    another key is never shown as current (``session.Session.set_settings``)."""
    return (settings.target, settings.api_generation, settings.compiler_backend, settings.runner_url)


MACHINE_SCOPED: frozenset[str] = frozenset(
    name for name, f in ServerSettings.model_fields.items() if f.json_schema_extra == _MACHINE)
MACHINE_NOTE = (" Machine-scoped: taken from user settings only (a workspace's settings cannot set it, "
                "the language server reads it only from its launch options).")


def machine_aliases() -> list[str]:
    """The camelCase keys of the machine-scoped settings (``runnerUrl``, ...), sorted."""
    return sorted(ServerSettings.model_fields[n].alias or n for n in MACHINE_SCOPED)


def split_machine(raw: Any) -> tuple[Any, list[str]]:
    """``raw`` (flat or under a section) without its machine-scoped keys, and the keys dropped."""
    if isinstance(raw, dict) and SECTION in raw and isinstance(raw[SECTION], dict):
        inner, dropped = split_machine(raw[SECTION])
        return {**raw, SECTION: inner}, dropped
    section = _section(raw)
    if not isinstance(section, dict):
        return raw, []
    keys = {a for n in MACHINE_SCOPED for a in (n, ServerSettings.model_fields[n].alias or n)}
    dropped = sorted(k for k in section if k in keys)
    kept = {k: v for k, v in section.items() if k not in keys}
    return kept, dropped


def with_machine(settings: ServerSettings, machine: ServerSettings) -> ServerSettings:
    """``settings`` with every machine-scoped field taken from ``machine`` (the launch options' values)."""
    return settings.model_copy(update={n: getattr(machine, n) for n in MACHINE_SCOPED})


def _section(raw: Any) -> Any:
    if isinstance(raw, dict):
        for key in (SECTION, "nki-agent", "nki"):
            if isinstance(raw.get(key), dict):
                return raw[key]
    return raw


def parse(raw: Any) -> tuple[ServerSettings, list[str]]:
    """Settings from a client payload, and the problems found (invalid fields fall back to defaults)."""
    if isinstance(raw, dict) and SECTION in raw and not isinstance(raw[SECTION], dict):
        return DEFAULTS, [f"{SECTION} must be an object, got {type(raw[SECTION]).__name__}"]
    raw = _section(raw)
    if raw is None:
        return DEFAULTS, []
    if not isinstance(raw, dict):
        return DEFAULTS, [f"settings must be an object, got {type(raw).__name__}"]
    data = dict(raw)
    problems: list[str] = []
    for _ in range(len(data) + 1):
        try:
            return ServerSettings.model_validate(data), problems
        except ValidationError as exc:
            bad = set()
            for err in exc.errors():
                key = str(err["loc"][0]) if err["loc"] else ""
                problems.append(f"{SECTION}.{key}: {err['msg']}")
                bad.add(key)
            if not bad & set(data):
                break
            data = {k: v for k, v in data.items() if k not in bad}
    return DEFAULTS, problems


def _json_type(schema: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "enum" in schema:
        out["type"] = "string"
        out["enum"] = schema["enum"]
    elif "const" in schema:
        out["type"] = "string"
        out["enum"] = [schema["const"]]
    else:
        out["type"] = schema.get("type", "string")
    for key in ("minimum", "maximum"):
        if key in schema:
            out[key] = schema[key]
    if out["type"] == "object":
        out["additionalProperties"] = {"type": "string", **{k: v for k, v in schema.get("additionalProperties", {})
                                                            .items() if k == "enum"}}
    return out


# settings the editor client applies itself (the server never reads them): declared here with the server's,
# so package.json's block stays generated from one place
CLIENT_SETTINGS: dict[str, dict[str, Any]] = {
    "inlayHints.shapes": {
        "type": "boolean",
        "default": True,
        "description": "Show the inlay hints after tensor assignments: the tensor's shape, dtype and buffer (`: (128, 512) float32 sbuf`), from the last simulation or static inference."
    },
    "inlayHints.tripCounts": {
        "type": "boolean",
        "default": True,
        "description": "Show the inlay hints after loops whose bounds are known statically: the trip count (` ×4`)."
    },
    "inlayHints.estimates": {
        "type": "boolean",
        "default": True,
        "description": "Show the inlay hints at the end of loop headers with the cost model's estimate (`≈ 41 % · DMA`; computed only while costHints is on). Estimated, never measured."
    }
}


def contributes_configuration() -> dict[str, Any]:
    """The VS Code ``contributes.configuration`` block generated from ``ServerSettings``."""
    schema = ServerSettings.model_json_schema(by_alias=True)
    props: dict[str, Any] = {}
    for name, field in ServerSettings.model_fields.items():
        alias = field.alias or name
        entry = _json_type(schema["properties"][alias])
        entry["default"] = getattr(DEFAULTS, name)
        entry["description"] = field.description or ""
        if name in MACHINE_SCOPED:
            entry["scope"] = "machine"
            entry["description"] += MACHINE_NOTE
        props[f"{SECTION}.{alias}"] = entry
    for key, entry in CLIENT_SETTINGS.items():
        props[f"{SECTION}.{key}"] = dict(entry)
    return {"title": "NKI Agent", "properties": props}


def untrusted_workspaces() -> dict[str, Any]:
    """package.json's ``capabilities.untrustedWorkspaces``: limited, the machine-scoped settings restricted."""
    return {"supported": "limited",
            "description": "In Restricted Mode NKI Agent takes the settings that decide where files and keys go or "
                           "what runs (" + ", ".join(machine_aliases()) + ") from your user settings only.",
            "restrictedConfigurations": [f"{SECTION}.{a}" for a in machine_aliases()]}


if __name__ == "__main__":  # python -m nki_agent.server.settings  -> the block for package.json
    json.dump(contributes_configuration(), sys.stdout, indent=2)
    sys.stdout.write("\n")
