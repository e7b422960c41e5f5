"""``nki-agent check FILE... [--format text|json|sarif] [--fix] [--severity CODE=LEVEL]``: what can be found
without running.

What is reported, in every format, is what the user asked to see (``diagnostics/suppress.py``): the file's
``# nki: ignore[...]`` comments, and the per-code severity of the nearest ``pyproject.toml`` with a
``[tool.nki-agent]`` table (``severity = {code = "warning"}``) overridden by ``--severity``. ``--fix`` applies
the fixes ``source.fixAll.nki`` applies in the editor (``diagnostics.fixes.fix_all``).
"""

from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path
from typing import List, Optional

import typer

from ..diagnostics import suppress
from ..diagnostics.fixes import fix_all
from ..diagnostics.model import Diagnostic, from_problem
from ..diagnostics.static import Settings, check_text
from ..toolchain.check import check_file
from ..toolchain.facts.targets import environment_target, resolve_target
from ..toolchain.source_facts import declared_target, generation_of_source
from ..toolchain.task_discovery import SELF, discover
from . import options
from .render import console, print_diagnostics, print_json


def diagnose(path: str, settings: Settings) -> list[Diagnostic]:
    """Toolchain file checks (syntax, size, kernels) plus the static NKI rules."""
    base = check_file(path)
    diags = [from_problem(p, "nki-check", path) for p in base.problems if p.code != "sim_no_kernel"]
    if any(d.code in ("sim_bad_input",) for d in diags):
        return diags
    try:
        text = Path(path).read_bytes()
    except OSError as e:
        return [Diagnostic("sim_bad_input", "error", f"cannot read {path}: {e}", path, 1, 1, 1, 2, "nki-check", "")]
    return diags + check_text(path, text, settings)


def target_of(path: str, given: str | None) -> str:
    """The target ``path`` is checked against: ``toolchain.facts.targets.resolve_target``, as ``verify`` and
    ``simulate`` resolve it — ``--target``, the ``TARGET`` of the file's task (``task_discovery``), the
    environment, then the file's API generation's default (trn3 for the new API)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        task = discover(path, text, {}, None)
        declared = None if task is None else declared_target(
            text if task.path == SELF else Path(task.path).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        text, declared = "", None
    return resolve_target(given, task=declared, environment=environment_target(),
                          generation=generation_of_source(text))


@lru_cache(maxsize=64)
def project_severity(folder: Path) -> dict[str, str]:
    """``[tool.nki-agent] severity`` of the nearest ``pyproject.toml`` above ``folder`` that has the table."""
    for d in (folder, *folder.parents):
        f = d / "pyproject.toml"
        if not f.is_file():
            continue
        try:
            table = tomllib.loads(f.read_text(encoding="utf-8")).get("tool", {}).get("nki-agent")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise typer.BadParameter(f"{f}: {e}") from None
        if isinstance(table, dict):
            try:
                return suppress.check_levels(table.get("severity", {}), f"{f} [tool.nki-agent]")
            except ValueError as e:
                raise typer.BadParameter(str(e)) from None
    return {}


def shown(path: str, diags: list[Diagnostic], severity: dict[str, str]) -> list[Diagnostic]:
    """``diags`` of ``path`` without what its ignore comments or ``severity`` hide, re-graded."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return suppress.apply(diags, "", path, severity)
    return suppress.apply(diags, text, path, severity)


def fix_file(path: str, settings: Settings, severity: dict[str, str] | None = None) -> int:
    """Apply every verified quick fix of what is shown (``fix_all``), in place; returns how many."""
    text = Path(path).read_text(encoding="utf-8")
    fixed, applied = fix_all(path, text, lambda p, t: suppress.apply(check_text(p, t, settings), t, p,
                                                                       severity or {}))
    if applied:
        Path(path).write_text(fixed, encoding="utf-8")
    return len(applied)


def command(
    files: List[str] = typer.Argument(..., help="Kernel files to check."),
    fmt: str = typer.Option("text", "--format", "-f", help="Output format: text, json or sarif."),
    json_out: bool = typer.Option(False, "--json", help="Same as --format json."),
    fix: bool = typer.Option(False, "--fix", help="Apply the quick fixes that pass their re-check, in place."),
    target: Optional[str] = options.Target,
    levels: List[str] = typer.Option([], "--severity", metavar="CODE=LEVEL",
                                     help="Report CODE as error, warning, information or hint, or not at all "
                                          "(off); repeatable; over [tool.nki-agent] severity in pyproject.toml."),
) -> None:
    """Check kernel files without running them: syntax, NKI rules, fixes."""
    fmt = "json" if json_out else fmt.lower()
    if fmt not in ("text", "json", "sarif"):
        raise typer.BadParameter("expected text, json or sarif", param_hint="--format")
    chosen = options.validate_target(target)
    settings = {f: Settings(target=target_of(f, chosen)) for f in files}
    try:
        given = suppress.parse_levels(levels)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--severity") from None
    severity = {f: {**project_severity(Path(f).resolve().parent), **given} for f in files}
    fixed = {f: fix_file(f, settings[f], severity[f]) for f in files} if fix else {}
    diags = [d for f in files for d in shown(f, diagnose(f, settings[f]), severity[f])]
    if fmt == "json":
        print_json({"diagnostics": [d.as_dict() for d in diags], "fixed": fixed})
    elif fmt == "sarif":
        from .sarif import to_sarif

        print_json(to_sarif(diags))
    else:
        for f, n in fixed.items():
            if n:
                console.print(f"{f}: applied {n} fix(es)", markup=False)
        print_diagnostics(diags)
        if not diags:
            console.print(f"{len(files)} file(s): no problems found", markup=False)
    raise typer.Exit(1 if any(d.severity == "error" for d in diags) else 0)
