"""Deterministic quick fixes for problems only a run finds (simulator ``Problem``s or their diagnostics).

``fixes_for(problem_or_diagnostic, text)`` proposes edits of the kernel file's text; nothing is offered
until ``verified`` re-runs verification of the fixed text (a temp copy) and the problem is gone with no
new one. Producers:

- ``err_unexpected_output_dependencies``: the ``affine_range`` loop named in the message carries a
  dependency -> ``sequential_range`` on that loop's header.
- ``err_unsupported_memory`` from a new-API ``nl.store`` / ``nisa.dma_copy`` of a PSUM tile -> copy the
  tile to SBUF with ``nisa.tensor_copy`` first (the static rule ``psum_to_hbm`` does the same when the
  buffer is known without running).
- any code a static rule also reports at the same line (``sim_unsupported_dtype`` of a bf16 PSUM matmul,
  ``err_tensor_output_not_written_to``...): the static rule's fix.
- a classic kernel the installed SDK cannot import (``No module named 'neuronxcc'``) -> ``migrate_to_new_api``.
- 1-D aranges reached through variables, ``and``/``or`` in masks, new-API calls under classic imports,
  low-precision PSUM accumulators and HBM outputs allocated inside a loop (wrong results): ``sim_fix_rules``.
"""

from __future__ import annotations

import ast
import os
import re
import tempfile
from collections import Counter
from dataclasses import dataclass

from ..toolchain import api
from nki_agent.toolchain.facts.errors import Problem
from . import sim_fix_rules
from .ast_edit import function_at, node_span
from .ast_edit import qual as _qual
from .fixes import apply_edits
from .migrate import migrate_to_new_api
from .model import Diagnostic, Fix, TextEdit
from .static import check_text, module_info
from .static.rules.psum_to_hbm import alias_of, copy_out_edits, source_of

LOOP_VAR = re.compile(r"iterations of (\w+) loop")
NO_CLASSIC = re.compile(r"No module named '?neuronxcc|neuronxcc(\.nki)? (is )?(not (found|installed|available)|removed)")


@dataclass(frozen=True)
class _Issue:
    code: str
    message: str
    line: int | None
    path: str | None


def _issue(p: Problem | Diagnostic) -> _Issue:
    if isinstance(p, Diagnostic):
        return _Issue(p.code, p.message, p.line, p.path or None)
    loc = p.location
    return _Issue(p.code, p.message, loc.line if loc else None, loc.path if loc else None)


def fixes_for(problem: Problem | Diagnostic, text: str, path: str | None = None) -> list[Fix]:
    """Candidate fixes (not yet re-checked) of one problem in the kernel file whose text is ``text``.

    ``path``: the file ``text`` belongs to; a problem located in another file gets no fix."""
    issue = _issue(problem)
    if path is not None and issue.path and os.path.realpath(issue.path) != os.path.realpath(path):
        return []
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    out: list[Fix] = []
    if NO_CLASSIC.search(issue.message):
        out.extend(migrate_to_new_api(text))
    if issue.line is None:
        return out
    if issue.code == "err_unexpected_output_dependencies":
        out.extend(_sequential_range(module, text, issue))
    elif issue.code == "err_1d_arange_not_supported":
        out.extend(sim_fix_rules.arange_through_names(module, text, issue.line))
    elif issue.code == "err_control_flow_condition_depending_on_arange":
        out.extend(sim_fix_rules.mask_bool_ops(module, text, issue.line))
    if issue.code in ("err_num_partition_exceed_arch_limit", "sim_matmul_operand_limit", "sim_shape_mismatch"):
        out.extend(sim_fix_rules.tile_constant(module, text, issue.line if issue.line and issue.line > 1 else None))
    if issue.code == "err_tensor_output_not_written_to":
        out.extend(sim_fix_rules.restore_output_store(module, text))
    if issue.code in ("sim_wrong_result", "sim_unsupported_dtype"):
        out.extend(sim_fix_rules.psum_fp32(module, text))
    if issue.code == "sim_wrong_result":
        out.extend(sim_fix_rules.hoist_shared_hbm(module, text))
    if "neuronxcc" in text:  # new-API code (dst= calls) under classic imports fails in many ways
        out.extend(sim_fix_rules.new_api_imports(text))
    elif issue.code == "err_unsupported_memory" and "PSUM" in issue.message:
        out.extend(_psum_copy(module, text, issue.line))
    seen = {f.edits for f in out}
    for d in check_text(path or issue.path or "kernel.py", text):
        if d.code == issue.code and d.line == issue.line:
            out.extend(f for f in d.fixes if f.edits not in seen)
    return out


def verified(problem: Problem | Diagnostic, text: str, fixes: list[Fix], task_path: str | None = None,
             kernel_name: str | None = None, target: str | None = None, seeds: int = 1,
             isolate: bool = True, directory: str | None = None) -> list[Fix]:
    """The fixes whose fixed text, verified again (sandboxed unless ``isolate=False``), no longer has the
    problem and has no problem code the original did not have. ``task_path=None``: the kernel file is its
    own task. ``directory``: where the temp copies go (the kernel's folder keeps sibling imports working)."""
    code = _issue(problem).code
    before = _codes(text, task_path, kernel_name, target, seeds, isolate, directory)
    kept = []
    for fix in fixes:
        try:
            fixed = apply_edits(text, fix.edits)
        except ValueError:
            continue
        after = _codes(fixed, task_path, kernel_name, target, seeds, isolate, directory)
        if repairs(code, before, after):
            kept.append(fix)
    return kept


def repairs(code: str, before: Counter[str], after: Counter[str]) -> bool:
    """The verdict on a fix from the problem codes of a run before and after it: ``code`` is gone (fewer
    of it; one, when the run before did not report it) and no code is more frequent than it was."""
    return after[code] < max(before[code], 1) and not any(after[c] > before[c] for c in after)


def problem_codes(diagnostics: list[Diagnostic] | tuple[Diagnostic, ...]) -> Counter[str]:
    """How often each code is reported as an error or a warning (what a fix must not add to)."""
    return Counter(d.code for d in diagnostics if d.severity in ("error", "warning"))


def _codes(text: str, task_path: str | None, kernel_name: str | None, target: str | None, seeds: int,
           isolate: bool, directory: str | None) -> Counter[str]:
    fd, tmp = tempfile.mkstemp(suffix=".py", prefix="nki_fix_", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        res = api.verify(tmp, task_path or tmp, seeds=seeds, target=target, kernel_name=kernel_name, isolate=isolate)
    finally:
        os.unlink(tmp)
    codes = Counter(p.code for p in res.problems if p.severity in ("error", "warning"))
    if res.compiled and not res.correct and not codes:
        codes["sim_wrong_result"] += 1  # a fix that runs but computes the wrong thing is no fix
    return codes


# -- positions ------------------------------------------------------------------------------------------
def _edit(text: str, node: ast.AST, new_text: str) -> TextEdit:
    return TextEdit(*node_span(text, node), new_text)


def _stmt_on_line(module: ast.Module, line: int) -> list[ast.AST]:
    return [n for n in ast.walk(module) if isinstance(n, ast.stmt) and n.lineno <= line <= (n.end_lineno or n.lineno)]


# -- affine_range -> sequential_range -------------------------------------------------------------------
def _sequential_range(module: ast.Module, text: str, issue: _Issue) -> list[Fix]:
    m = LOOP_VAR.search(issue.message)
    if m is None or issue.line is None:
        return []
    var, line = m.group(1), issue.line
    loops = [n for n in _stmt_on_line(module, line) if isinstance(n, ast.For) and isinstance(n.target, ast.Name)
             and n.target.id == var and isinstance(n.iter, ast.Call) and isinstance(n.iter.func, ast.Attribute)
             and n.iter.func.attr == "affine_range"]
    if not loops:
        return []
    loop = max(loops, key=lambda n: n.lineno)  # the innermost loop of that name around the line
    func = loop.iter.func  # type: ignore[attr-defined]
    seg = ast.get_source_segment(text, func)
    if seg is None or not seg.endswith("affine_range"):
        return []
    return [Fix(f"Run the `{var}` loop sequentially (nl.sequential_range)",
                (_edit(text, func, seg[: -len("affine_range")] + "sequential_range"),))]


# -- PSUM -> SBUF before a DMA --------------------------------------------------------------------------
def _psum_copy(module: ast.Module, text: str, line: int) -> list[Fix]:
    info = module_info(module)
    if info.generation != "new":
        return []
    nl, nisa = alias_of(info.aliases, "nki.language"), alias_of(info.aliases, "nki.isa")
    if nl is None or nisa is None:
        return []
    fn = function_at(module, line)
    for stmt in _stmt_on_line(module, line):
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and stmt.lineno == line):
            continue
        call = stmt.value
        qual = _qual(call.func, info.aliases)
        which = ("nl", "store") if qual == "nki.language.store" else ("nisa", "dma_copy") \
            if qual == "nki.isa.dma_copy" else None
        src = source_of(call, which) if which else None
        if src is None:
            continue
        edits = copy_out_edits(stmt, src, text, fn or module, nl, nisa)
        if edits:
            return [Fix("Copy the PSUM tile to SBUF before the DMA", tuple(_edit(text, n, t) for n, t in edits))]
    return []
