"""``nki-agent check FILE... [--format text|json|sarif] [--fix]``: what can be found without running."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..diagnostics.fixes import apply_edits, verified_fixes
from ..diagnostics.model import Diagnostic, from_problem
from ..diagnostics.static import Settings, check_text
from ..toolchain.check import check_file
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


def fix_file(path: str, settings: Settings) -> int:
    """Apply every verified quick fix (non-overlapping, first fix per diagnostic); returns how many."""
    applied = 0
    for _ in range(10):  # fixes can unblock each other; bounded rounds
        text = Path(path).read_text(encoding="utf-8")
        diags = check_text(path, text, settings)
        offered = verified_fixes(path, text, diags, lambda p, t: check_text(p, t, settings))
        if not offered:
            break
        fix = offered[min(offered)][0]
        Path(path).write_text(apply_edits(text, fix.edits), encoding="utf-8")
        applied += 1
    return applied


def command(
    files: List[str] = typer.Argument(..., help="Kernel files to check."),
    fmt: str = typer.Option("text", "--format", "-f", help="Output format: text, json or sarif."),
    json_out: bool = typer.Option(False, "--json", help="Same as --format json."),
    fix: bool = typer.Option(False, "--fix", help="Apply the quick fixes that pass their re-check, in place."),
    target: Optional[str] = options.Target,
) -> None:
    """Check kernel files without running them: syntax, NKI rules, fixes."""
    fmt = "json" if json_out else fmt.lower()
    if fmt not in ("text", "json", "sarif"):
        raise typer.BadParameter("expected text, json or sarif", param_hint="--format")
    settings = Settings(target=options.validate_target(target) or "trn1")
    fixed = {f: fix_file(f, settings) for f in files} if fix else {}
    diags = [d for f in files for d in diagnose(f, settings)]
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
