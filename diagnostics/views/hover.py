"""Hover content as a pure function of a ``DocumentView`` and a position: tensors, kernel parameters, NKI
calls, the cost model's figures and error codes (the server's ``handlers/hover.py`` only converts).

- a tensor name: shape, rank, dtype, buffer, partition usage n/128, bytes per partition and the
  SBUF/PSUM capacity of the view's target (the last simulation's trace wins over static facts);
- a kernel parameter: rank and shape from the task's inputs when a simulation reported them;
- ``nl.*`` / ``nisa.*`` calls: a short signature + limits blurb (``api_reference``);
- a kernel's name: the cost model's estimate (summary, per-engine busy table, notes) and the remote
  runner's figures, each under its own heading;
- a loop header or any line the cost model attributes time to: "this loop: 41 % of estimated time, ..."
  / "this line: 12 % of estimated time (...)" (``diagnostics.cost_view``: lines follow the edits made
  since the run, edited lines have none);
- an error code in a comment, or any position under a squiggle: the code's explanation.

The target shown is ``shown_target``'s: the one the document's last local run used (only runs of the current
settings are in a view), else ``resolve_target``'s (the setting, the task's ``TARGET``, the API generation).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from ...toolchain.facts.targets import get_target, resolve_target
from ...toolchain.protocol.jobs import ProfileResult, VerifyResult
from ...toolchain.source_facts import generation_of_modules, namespace_of
from .. import api_reference as api_table
from ..cost_view import CostView, estimate_markdown, line_phrase, loop_phrase
from .context import DocumentView
from .explain import code_at, explain
from .facts import TensorFact, fact_at, simulation_facts
from .runs import RunResult

_WORD = re.compile(r"[A-Za-z_][\w.]*")
_IMPORT_AS = re.compile(r"^\s*import\s+([\w.]+)\s+as\s+(\w+)", re.MULTILINE)
_FROM_IMPORT = re.compile(r"^\s*from\s+([\w.]+)\s+import\s+(\w+)(?:\s+as\s+(\w+))?", re.MULTILINE)

DTYPE_BYTES = {"float32": 4, "tfloat32": 4, "int32": 4, "uint32": 4, "float16": 2, "bfloat16": 2, "int16": 2,
               "uint16": 2, "int8": 1, "uint8": 1, "bool": 1, "bool_": 1, "float8_e4m3": 1, "float8_e5m2": 1,
               "float8_e4m3fn": 1, "float8_e8m0fnu": 1, "float64": 8, "int64": 8}
_MODULES = re.compile(r"^\s*(?:import|from)\s+([\w.]+)", re.MULTILINE)


def generation_of_text(text: str) -> str:
    """The API generation of a buffer from its import lines (works while the file does not parse)."""
    return generation_of_modules(_MODULES.findall(text))


def namespaces(text: str) -> dict[str, str]:
    """alias -> 'nl' | 'nisa' from the file's imports (defaults: nl, nisa); read line by line, so a file
    that does not parse while being typed still has them."""
    out = {"nl": "nl", "nisa": "nisa"}
    for mod, alias in _IMPORT_AS.findall(text):
        ns = namespace_of(mod)
        if ns in ("nl", "nisa"):
            out[alias] = ns
    for mod, name, alias in _FROM_IMPORT.findall(text):
        ns = namespace_of(f"{mod}.{name}")
        if ns in ("nl", "nisa"):
            out[alias or name] = ns
    return out


def shown_target(runs: Mapping[str, RunResult], setting: str, task_target: str | None, text: str) -> str:
    """The target hovers show: the one the document's last local run used, else the one it would use
    (``toolchain.targets.resolve_target``: the setting, else its task's ``TARGET``, else the file's API
    generation's default) — the static check's target too."""
    for run in runs.values():
        if run.kind != "remote" and run.result.target:
            return run.result.target
    return resolve_target(setting, task=task_target, generation=generation_of_text(text))


def word_at(line: str, index: int) -> tuple[str, int, int] | None:
    for m in _WORD.finditer(line):
        if m.start() <= index <= m.end():
            return m.group(0), m.start(), m.end()
    return None


def fmt_shape(shape: tuple[int | None, ...] | None) -> str:
    if shape is None:
        return "unknown"
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def tensor_markdown(f: TensorFact, target: str) -> str:
    t = get_target(target)
    rows = [f"**{f.name}** — tensor ({'last simulation' if f.source == 'simulation' else 'static inference'})", "",
            "| | |", "|---|---|",
            f"| shape | `{fmt_shape(f.shape)}` |",
            f"| rank | {len(f.shape) if f.shape is not None else '?'} |",
            f"| dtype | {f.dtype or '?'} |",
            f"| buffer | {f.buffer or '?'} |"]
    if len(f.shapes_seen) > 1:
        rows.append(f"| shapes seen | {', '.join(fmt_shape(s) for s in f.shapes_seen[:4])} |")
    on_chip = f.buffer in ("sbuf", "psum")
    if on_chip and f.shape:
        axis = f.partition_axis if 0 <= f.partition_axis < len(f.shape) else 0
        p = f.shape[axis]
        where = f" (dim {axis}, nl.par_dim)" if axis else ""
        rows.append(f"| partitions | {p if p is not None else '?'}/{t.pmax}{where} |")
        free = f.shape[:axis] + f.shape[axis + 1:]
        size = DTYPE_BYTES.get(f.dtype or "")
        if size and all(d is not None for d in free):
            per = math.prod(d for d in free if d is not None) * size
            cap = t.sbuf_bytes_per_partition if f.buffer == "sbuf" else t.psum_bytes_per_partition
            rows.append(f"| bytes / partition | {per:,} B of {cap:,} B ({100 * per / cap:.1f}% of "
                        f"{(f.buffer or '').upper()} on {t.name}) |")
    if f.source == "static" and (f.shape is None or None in f.shape):
        rows.append("| | `?`: depends on values known only when the kernel runs (its inputs' shapes); the next "
                    "simulation fills it in |")
    rows.append(f"| {target} capacity | SBUF {t.sbuf_bytes_per_partition:,} B, PSUM {t.psum_bytes_per_partition:,} B "
                "per partition |")
    return "\n".join(rows)


def markdown(view: DocumentView, line0: int, index: int) -> str | None:
    """The hover at line ``line0`` (0-based), code-point ``index`` of that line; None: nothing to say."""
    lines = view.lines
    if line0 < 0 or line0 >= len(lines):
        return None
    text = lines[line0].rstrip("\r")
    parts: list[str] = []
    code = code_at(text, index)
    if code:
        parts.append(explain(code))
    else:
        found = word_at(text, index)
        if found:
            head = found[0].split(".")
            # cut the dotted word at the hovered segment: hovering `nl` in `nl.load` is still the call
            ns = namespaces(view.text).get(head[0])
            if ns and len(head) >= 2:
                md = api_table.markdown(ns, head[1], generation_of_text(view.text), view.target,
                                        attribute=head[2] if len(head) > 2 else "")
                if md:
                    parts.append(md)
            else:
                md = _name_markdown(view, head[0], line0 + 1)
                if md:
                    parts.append(md)
        if len(text) - len(text.lstrip()) <= index < len(text.rstrip()):  # on the line's code, not its margins
            cost = cost_markdown(view.cost, line0 + 1)
            if cost:
                parts.append(cost)
    # under a squiggle: explain its code (once per code)
    seen = {code} if code else set()
    for d in view.diagnostics:
        if d.line - 1 <= line0 <= d.end_line - 1 and d.code not in seen:
            if d.line == d.end_line and not (d.column - 1 <= index <= d.end_column - 1):
                continue
            seen.add(d.code)
            parts.append(explain(d.code))
    return "\n\n---\n\n".join(parts) if parts else None


STALE = "estimate of an earlier version of this file"


def cost_markdown(view: CostView | None, line1: int) -> str | None:
    """The estimated share of the loop headed at ``line1`` and of the line itself, if the model has them."""
    if view is None:
        return None
    loop, cost = view.loop_at(line1), view.line_at(line1)
    bits = ([loop_phrase(loop)] if loop is not None else []) + ([line_phrase(cost)] if cost is not None else [])
    if not bits:
        return None
    return "\n\n".join(bits + ([f"*({STALE})*"] if view.stale else []))


def _estimate_markdown(view: DocumentView, kernel: str, line1: int) -> str | None:
    cost = view.cost
    if cost is None or cost.kernel_line([(k.name, k.line) for k in view.facts.kernels]) != line1:
        return None
    return estimate_markdown(cost.estimate, f"**{kernel}** — cost model estimate" + (f" ({STALE})" if cost.stale else ""))


def _runner_markdown(view: DocumentView, kernel: str) -> str | None:
    """The remote runner's last result for the document: verdict, backend, latency figures."""
    run = view.runs.get("remote")
    if run is None or not isinstance(run.result, VerifyResult):
        return None
    res = run.result
    verdict = "correct" if res.correct else ("wrong result" if res.compiled else "did not run")
    stale = "" if run.revision == view.revision else " (for an earlier version of this file)"
    rows = [f"**{kernel}** — remote runner{stale}", "", "| | |", "|---|---|",
            f"| verdict | {verdict} on {len(res.seeds)} seed(s) |", f"| runner | {res.runner} ({res.backend}) |"]
    if isinstance(res, ProfileResult):
        lat = res.latency
        rows.append(f"| latency | {lat.summary()} |")
        if lat.kind != "not measured" and lat.mean_us is not None:
            rows.append(f"| mean ± std | {lat.mean_us:.4g} ± {lat.std_us or 0:.2g} µs |")
        if res.speedup is not None:
            rows.append(f"| speedup over baseline | {res.speedup:.3g}× |")
    return "\n".join(rows)


def _name_markdown(view: DocumentView, name: str, line1: int) -> str | None:
    facts = view.facts
    for k in facts.kernels:
        if k.name == name and k.line == line1:
            found = [md for md in (_estimate_markdown(view, k.name, line1), _runner_markdown(view, k.name)) if md]
            if found:
                return "\n\n---\n\n".join(found)
        if any(p[0] == name and p[1] <= line1 for p in k.params) and k.line <= line1:
            shape = view.input_shapes.get(k.name, {}).get(name)
            if shape is not None:
                return (f"**{name}** — parameter of kernel `{k.name}`\n\nrank {len(shape)}, shape `{fmt_shape(shape)}` "
                        "(from the task's inputs in the last simulation)")
            decl = fact_at([f for f in facts.tensors if f.line == k.line], name, line1)
            if decl is not None and decl.shape is not None:
                return f"**{name}** — parameter of kernel `{k.name}`\n\nrank {len(decl.shape)}, shape `{fmt_shape(decl.shape)}`"
            if fact_at(facts.tensors, name, line1) is None:
                return (f"**{name}** — parameter of kernel `{k.name}`\n\nshape `?`: it comes from the kernel's inputs, "
                        "known once a simulation has run (save the file), or declare it `nt.tensor[...]`")
    f = fact_at(known_tensors(view), name, line1)
    if f is None:
        return None
    return tensor_markdown(f, view.target)


def known_tensors(view: DocumentView) -> list[TensorFact]:
    """Static facts, then the local runs' simulation facts placed on this buffer (they win where both exist)."""
    out = list(view.facts.tensors)
    for run in view.local_runs():
        out.extend(simulation_facts(run.trace, run.text, view.text, view.facts.tensors))
    return out
