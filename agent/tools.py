"""The agent's tools: ``compile``, ``verify``, ``profile``, ``lookup`` — run on the current candidate.

A ``ToolBox`` holds the candidate kernel text. ``compile`` and ``verify`` accept a whole new file
(``code``) or exact-text replacements (``edits``: the paper's "local repair"), refuse candidates that
reach for the task or the verifier (``integrity``), run the static checks, then the active toolchain
(the real Neuron SDK when installed, else the embedded simulator) on a private temporary copy: the
user's files are never written. The user's kernel folder comes after the copy's on the import path
(``search_path``), so sibling helper modules import while the copy shadows the user's file of the
same name; that folder is only read (no bytecode is written there). The task is the user's file,
fixed for the run; when the kernel file is its own task, the *original* text serves as the task so
the model cannot edit the reference, and the kernel's jail cannot open the user's original either.
Results are text for the model (decoded diagnosis, "fix only what the error names") plus structured
facts for the loop (diagnostics, verdict).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..diagnostics import catalog
from ..diagnostics.api_reference import API
from ..diagnostics.compiler import EMBEDDED, compile_kernel, detect
from ..diagnostics.compiler import CompileResult as SdkCompileResult
from ..diagnostics.model import Diagnostic, from_problem
from ..diagnostics.static import Settings as CheckSettings
from ..diagnostics.static import check_text
from ..toolchain import api
from nki_agent.toolchain.protocol.jobs import CompileResult, VerifyResult
from nki_agent.toolchain.protocol.cost import CostEstimate
from nki_agent.toolchain.judging.results import compile_result
from nki_agent.toolchain.facts.targets import get_target
from . import integrity
from .protocol import ToolCall, ToolSpec

MAX_SHOWN = 5  # diagnoses per tool result: the first errors matter, a wall of them drowns the model
MAX_CODE_BYTES = 256 * 1024  # a kernel file is a few KB; anything this large is not a kernel
TOOL_TIMEOUT = 120.0  # seconds per compile/verify job in the sandbox
# Warnings that mean "correct on the simulator, wrong on hardware": a kernel with one does not count as verified.
HARDWARE_RISK = frozenset({"err_unexpected_output_dependencies"})
EXAMPLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")

_CODE_ARGS = {
    "code": {"type": "string", "description": "The complete new kernel file. Omit to use the current candidate."},
    "edits": {"type": "array", "description": "Exact-text replacements applied to the current candidate, in order "
              "(prefer this for local repairs). Each `old` must occur exactly once.",
              "items": {"type": "object", "properties": {"old": {"type": "string"}, "new": {"type": "string"}},
                        "required": ["old", "new"]}},
}
SPECS = [
    ToolSpec("compile", "Trace/compile the kernel (static NKI checks, then the NKI toolchain on the task's inputs). "
             "Returns decoded errors with line numbers, or OK.", {"type": "object", "properties": _CODE_ARGS}),
    ToolSpec("verify", "Run the kernel on the task's inputs over several random seeds and compare every output with "
             "the task's reference. The run ends as soon as a kernel verifies.",
             {"type": "object", "properties": _CODE_ARGS}),
    ToolSpec("profile", "Latency of the current candidate (measured on a Trainium runner or estimated by the cost "
             "model).", {"type": "object", "properties": {}}),
    ToolSpec("lookup", "Look up an error code (e.g. err_unsupported_memory, NCC_EVRF007), an NKI API "
             "(e.g. nisa.nc_matmul, nl.load), the target's hardware limits ('limits'), or example kernels by "
             "operation ('example matmul').",
             {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
]


def estimate_lines(est: CostEstimate | None) -> list[str]:
    """The cost model's estimate for a model to act on: bound, engines, the most expensive lines and loops."""
    if est is None:
        return []
    out = [f"cost model (estimated, not measured): {est.summary()}; FLOP utilisation {est.flop_utilisation:.0%}, "
           f"DMA bandwidth {est.bandwidth_utilisation:.0%}"]
    busy = sorted((e for e in est.engines if e.busy_us > 0), key=lambda e: -e.busy_us)[:4]
    if busy:
        out.append("busiest: " + ", ".join(f"{e.lane} {e.utilisation:.0%}" for e in busy))
    out += [f"line {ln.line}: {ln.share:.0%} of the time ({ln.api} on {ln.engine})" for ln in est.lines[:5]]
    out += [f"loop `{lp.var}` at line {lp.line} ({lp.kind}, {lp.trips} trips): {lp.share:.0%}, {lp.bound}-bound"
            for lp in est.loops[:3]]
    return out + [f"note: {n}" for n in est.notes[:3]]


class Profiler(Protocol):
    """A custom latency source (tests, a device harness): latency of a kernel file on a task as text."""

    def profile(self, kernel_path: str, task_path: str, target: str | None) -> str: ...


@dataclass
class ToolOutcome:
    """What one tool call did: text for the model, facts for the loop."""

    content: str
    is_error: bool = False
    verified: bool = False
    ran: str = ""  # compile | verify | profile | lookup
    diagnostics: list[Diagnostic] = field(default_factory=list)
    code_changed: bool = False
    result: VerifyResult | CompileResult | None = None  # the toolchain's typed result, when one ran

    @property
    def sandbox(self) -> str:
        """How the toolchain ran the candidate (bwrap, unsandboxed, in-process; "" if nothing ran jailed)."""
        return self.result.sandbox if self.result is not None else ""


class ToolBox:
    """The tools of one run, bound to one kernel (shown as ``path``) and one task."""

    def __init__(self, path: str, original: str, task_path: str, *, self_task: bool = False,
                 target: str | None = None, sdk_generation: str = "", seeds: int = 3,
                 profiler: Profiler | None = None, cancel: threading.Event | None = None,
                 prefer_toolchain: str = "auto", timeout: float = TOOL_TIMEOUT, isolate: bool = True):
        self.path = path
        self.original = original
        self.code = original
        self.target = target
        self.sdk_generation = sdk_generation
        self.seeds = seeds
        self.profiler = profiler
        self.cancel = cancel or threading.Event()
        self.prefer = prefer_toolchain
        self.timeout = timeout
        self.isolate = isolate
        self._real_sdk: bool | None = None
        self.diagnostics: list[Diagnostic] = []
        self.verified_code: str | None = None
        self.last_verify: VerifyResult | None = None
        self.self_task = self_task
        self._dir = tempfile.mkdtemp(prefix="nki-agent-run-")
        self._kernel = os.path.join(self._dir, os.path.basename(path) or "kernel.py")
        if self_task:  # the user's original file is the task: the candidate cannot move the goalposts
            self.task_path = os.path.join(self._dir, "_task_" + (os.path.basename(path) or "kernel.py"))
            with open(self.task_path, "w", encoding="utf-8") as fh:
                fh.write(original)
            self._user_task = path
        else:
            self.task_path = task_path
            self._user_task = task_path
        self.task_digest = _digest(self.task_path)
        self.search_path = user_folder(path)
        # files a candidate's jail may not open besides the task: the user's original when it is the task
        self.protect: tuple[str, ...] = (os.path.abspath(path),) if self_task else ()

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)

    def specs(self) -> list[ToolSpec]:
        return list(SPECS)

    # -- dispatch -------------------------------------------------------------------------------
    def run(self, call: ToolCall) -> ToolOutcome:
        args = call.arguments if isinstance(call.arguments, dict) else {}
        if "_raw" in args:
            return ToolOutcome(f"your {call.name} arguments were not valid JSON; send a JSON object "
                               "({\"code\": ...} or {\"edits\": [...]})", is_error=True, ran=call.name)
        if call.name in ("compile", "verify"):
            return self._run_code_tool(call.name, args)
        if call.name == "profile":
            return self.profile()
        if call.name == "lookup":
            return ToolOutcome(lookup(str(args.get("query", "")), self.target), ran="lookup")
        names = ", ".join(s.name for s in SPECS)
        return ToolOutcome(f"unknown tool {call.name!r}; the tools are {names}", is_error=True, ran=call.name)

    def candidate(self, args: dict[str, Any]) -> tuple[str | None, str]:
        """The candidate text named by ``code``/``edits`` (None + why when they cannot apply)."""
        code, edits = args.get("code"), args.get("edits")
        if code is not None and not isinstance(code, str):
            return None, "`code` must be a string holding the whole kernel file"
        text = self.code if code is None else code
        if edits:
            if not isinstance(edits, list):
                return None, "`edits` must be a list of {old, new} objects"
            for k, e in enumerate(edits):
                if not isinstance(e, dict) or not isinstance(e.get("old"), str) or not isinstance(e.get("new"), str):
                    return None, f"edit {k}: needs string fields `old` and `new`"
                count = text.count(e["old"]) if e["old"] else 0
                if count != 1:
                    return None, (f"edit {k}: `old` occurs {count} times in the current kernel; it must occur exactly "
                                  "once (include more surrounding lines)")
                text = text.replace(e["old"], e["new"], 1)
        if len(text.encode("utf-8", "surrogatepass")) > MAX_CODE_BYTES:
            return None, f"the kernel is larger than {MAX_CODE_BYTES // 1024} KiB; send the kernel file only"
        return text, ""

    def _run_code_tool(self, name: str, args: dict[str, Any]) -> ToolOutcome:
        text, why = self.candidate(args)
        if text is None:
            return ToolOutcome(why, is_error=True, ran=name)
        notes = []
        ignored = integrity.ignored_arguments(args)
        if ignored:
            notes.append(f"note: ignored {', '.join(ignored)} — the task, its reference and the tolerance are fixed "
                         "by the user; tools always verify against them unchanged")
        bad = integrity.new_violations(text, self.original, self._user_task)
        if self.self_task:
            bad += [f"changes the task definition `{name}` (this file is its own task: the reference, inputs and "
                    "tolerance are the user's)" for name in integrity.task_changes(text, self.original)]
        if bad:
            return ToolOutcome("refused: the kernel may change only itself, not the task, the reference or the "
                               "verifier:\n" + "\n".join(f"- {b}" for b in bad) + "\nRemove these and try again.",
                               is_error=True, ran=name)
        changed = text != self.code
        self.code = text
        outcome = self.compile(text) if name == "compile" else self.verify(text)
        outcome.code_changed = changed
        if notes:
            outcome.content = "\n".join(notes) + "\n" + outcome.content
        return outcome

    # -- the tools ------------------------------------------------------------------------------
    def _write(self, text: str) -> str:
        with open(self._kernel, "w", encoding="utf-8", errors="surrogatepass") as fh:
            fh.write(text)
        return self._kernel

    def static(self, text: str) -> list[Diagnostic]:
        settings = CheckSettings(target=self.target or "trn1", sdk_generation=self.sdk_generation)
        return [d for d in check_text(self.path, text, settings) if d.severity in ("error", "warning")]

    def compile(self, text: str) -> ToolOutcome:
        diags = self.static(text)
        if any(d.severity == "error" for d in diags):
            self.diagnostics = diags
            return ToolOutcome(render("compile", "FAILED (static NKI checks)", diags, text, self.path), ran="compile",
                               diagnostics=diags)
        if self._real_sdk is None:  # detected once per run: it scans the interpreter's search path
            sdk = detect() if self.prefer != EMBEDDED else None
            self._real_sdk = bool(sdk and (sdk.neuronxcc or sdk.nki))
        if self.isolate and not self._real_sdk:
            # embedded toolchain: trace on the task's inputs in the jail (one seed, no verdict)
            # (a judged one-seed run rather than api.compile: ``protect`` keeps the user's original unreadable)
            traced = api.verify(self._write(text), self.task_path, seeds=1, target=self.target,
                                timeout=self.timeout, cancel=self.cancel, search_path=self.search_path,
                                protect=self.protect)
            found = [self._relocate(from_problem(p, "nki-sim", self.path)) for p in traced.problem_list()]
            found += [d for d in diags if d.severity == "warning"]
            self.diagnostics = found
            ok = traced.compiled and not any(d.severity == "error" for d in found)
            head = f"{'OK' if ok else 'FAILED'} (toolchain: embedded NKI simulator, traced on the task's inputs)"
            return ToolOutcome(render("compile", head, found, text, self.path), ran="compile", diagnostics=found,
                               result=compile_result(traced))
        res = self._compile_unconfined(self._write(text))
        found = [self._relocate(d) for d in res.diagnostics] + [d for d in diags if d.severity == "warning"]
        self.diagnostics = found
        status = "OK" if res.ok else "FAILED"
        head = f"{status} (toolchain: {res.backend}, {res.detail})"
        return ToolOutcome(render("compile", head, found, text, self.path), ran="compile", diagnostics=found,
                           result=CompileResult(kernel=self.path, task=self.task_path, backend=res.backend,
                                                compiled=res.ok, stage="compiled" if res.ok else "none"))

    def verify(self, text: str) -> ToolOutcome:
        diags = self.static(text)
        if any(d.severity == "error" for d in diags):
            self.diagnostics = diags
            return ToolOutcome(render("verify", "NOT RUN: the kernel does not compile", diags, text, self.path),
                               ran="verify", diagnostics=diags)
        # reference and kernel in separate jailed workers, outputs compared in this process (toolchain/judging/judge.py)
        res = api.verify(self._write(text), self.task_path, seeds=self.seeds, target=self.target,
                         timeout=self.timeout, cancel=self.cancel, isolate=self.isolate,
                         search_path=self.search_path, protect=self.protect)
        self.last_verify = res
        problems = [self._relocate(from_problem(p, "nki-verify", self.path)) for p in res.problem_list()]
        if _digest(self.task_path) != self.task_digest:
            raise TamperError("the task file changed during verification")
        risky = [d for d in problems if d.code in HARDWARE_RISK]
        correct = res.correct and not risky
        self.diagnostics = [d for d in problems if d.severity == "error"] + risky
        if res.correct and risky:
            head = ("outputs match on the simulator, but NOT ACCEPTED: the simulator runs loop iterations in order, "
                    "hardware does not")
        elif correct:
            self.verified_code = text
            head = f"CORRECT on {len(res.seeds)} seeds (max abs error {res.max_abs_error:.3g})"
        elif res.compiled:
            failed = [s for s in res.seeds if not s.correct]
            head = "WRONG RESULT\n" + "\n".join(f"- seed {'(hidden)' if s.seed is None else s.seed}: {s.message}"
                                                 for s in failed)
            if not self.diagnostics:
                fm = next((s.first_mismatch for s in failed if s.first_mismatch is not None), None)
                line = fm.line if fm is not None and fm.line else 1
                self.diagnostics = [Diagnostic("sim_wrong_result", "error", head.splitlines()[1][2:], self.path, line,
                                               1, line, 2, "nki-verify", catalog.doc_url("sim_wrong_result"))]
        else:
            head = "FAILED before producing outputs"
        shown = problems if not correct else [d for d in problems if d.severity == "warning"]
        return ToolOutcome(render("verify", head, shown, text, self.path), ran="verify", verified=correct,
                           diagnostics=self.diagnostics, result=res)

    def _compile_unconfined(self, kernel: str) -> SdkCompileResult:
        """The real SDK or the embedded simulator (sandboxed, cancellable); both import the user's sibling
        modules from ``search_path`` and write nothing there."""
        return compile_kernel(kernel, self.task_path, target=self.target, mode="simulate", timeout=self.timeout,
                              prefer=self.prefer if self._real_sdk else EMBEDDED, search_path=self.search_path,
                              cancel=self.cancel)

    def profile(self) -> ToolOutcome:
        if self.profiler is not None:
            return ToolOutcome(self.profiler.profile(self._write(self.code), self.task_path, self.target),
                               ran="profile")
        from nki_agent.toolchain.isolation import runner

        # on a remote runner: verify + latency on its backend (measured on a device, never invented); here:
        # the embedded simulator's verdict and the cost model's estimate, labelled as such
        local = runner.current().name == "local" or not self.isolate
        res = api.profile(self._write(self.code), self.task_path, seeds=1, target=self.target, timeout=self.timeout,
                          cancel=self.cancel, search_path=self.search_path, protect=self.protect,
                          isolate=self.isolate)
        verdict = "correct" if res.correct else "NOT correct" if res.compiled else "did not run"
        where = "the embedded simulator (no Trainium runner configured)" if local else \
            f"{res.runner} ({res.backend} backend)"
        lines = [f"profile on {where}: {verdict}; {res.latency.summary()}"]
        if res.latency.kind == "measured" and res.latency.mean_us is not None:
            lines.append(f"mean {res.latency.mean_us:.4g} us, std {res.latency.std_us or 0:.2g} us, "
                         f"{res.latency.iterations} timed iterations after {res.latency.warmup} warmup")
        lines += estimate_lines(res.estimate)
        lines += [f"- {p.code}: {p.message}" for p in res.problems][:10]
        return ToolOutcome("\n".join(lines), ran="profile", result=res)

    def _relocate(self, d: Diagnostic) -> Diagnostic:
        from dataclasses import replace

        if not d.path or os.path.basename(d.path) == os.path.basename(self._kernel) and \
                os.path.dirname(os.path.abspath(d.path)) == self._dir:
            return replace(d, path=self.path)
        if os.path.abspath(d.path) == os.path.abspath(self.task_path):
            return replace(d, path=self._user_task)
        return d


def user_folder(path: str) -> tuple[str, ...]:
    """The folder of the user's kernel ``path`` as a one-entry search path (empty for an unsaved buffer
    or a folder that does not exist)."""
    folder = os.path.dirname(os.path.abspath(path)) if path else ""
    return (folder,) if folder and os.path.isdir(folder) else ()


class TamperError(RuntimeError):
    """The task file changed while the agent ran: the run is void."""


def _digest(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return ""


def render(tool: str, head: str, diags: list[Diagnostic], text: str, path: str | None = None) -> str:
    """A tool result as the model reads it: verdict, then each diagnosis decoded (line, code, why, fix).

    The source line is quoted from ``text`` only for diagnostics of ``path`` (the kernel), when given:
    an error inside a sibling helper module has its own line numbers."""
    lines = text.split("\n")
    out = [f"{tool}: {head}"]
    for d in diags[:MAX_SHOWN]:
        out.append(f"\n{d.severity} {d.code} at line {d.line}, column {d.column}: {d.message}")
        if 1 <= d.line <= len(lines) and d.path and not d.path.endswith("task.py") and path in (None, d.path):
            src = lines[d.line - 1]
            out.append(f"    {d.line:4d} | {src}")
            width = max(1, (d.end_column - d.column) if d.end_line == d.line else len(src) - d.column + 1)
            out.append("         | " + " " * (d.column - 1) + "^" * min(width, 80))
        entry = catalog.lookup(d.code)
        if entry is not None:
            out.append(f"  why: {entry.explanation}")
            out.append(f"  fix: {entry.fix}")
            out.append(f"  docs: {entry.doc_url}")
    if len(diags) > MAX_SHOWN:
        out.append(f"\n(+{len(diags) - MAX_SHOWN} more)")
    if diags and any(d.severity == "error" for d in diags):
        out.append("\nFix only what the errors name; keep the rest of the kernel unchanged.")
    return "\n".join(out)


def lookup(query: str, target: str | None = None) -> str:
    """Catalog entry, API reference, hardware limits or example kernels for ``query``."""
    q = query.strip()
    if not q:
        return "lookup: give an error code, an API name (nl.load), 'limits' or 'example <op>'"
    entry = catalog.lookup(q.split()[0])
    if entry is not None:
        return f"{entry.code}: {entry.title}\nwhy: {entry.explanation}\nfix: {entry.fix}\ndocs: {entry.doc_url}"
    if q.lower() in ("limits", "hardware", "target"):
        t = get_target(target)
        return (f"{t.name}: {t.pmax} partitions per tile; SBUF {t.sbuf_bytes_per_partition} B/partition; PSUM "
                f"{t.psum_bytes_per_partition} B/partition in {t.psum_banks} banks of {t.psum_bank_bytes} B; matmul "
                f"stationary free <= {t.gemm_stationary_fmax}, moving free <= {t.gemm_moving_fmax}, contraction <= "
                f"{t.pmax}; matmul operand dtypes {', '.join(t.matmul_input_dtypes)}")
    if q.lower().startswith("example"):
        return _examples(q.split(None, 1)[1] if " " in q else "")
    name = q.split(".")[-1].split("(")[0]
    ns = q.split(".")[0] if "." in q else ""
    docs = [doc for (n, k), doc in API.items() if k == name and (not ns or n == ns)]
    if docs:
        t = get_target(target)
        return "\n\n".join(f"{d.signature}\n" + d.blurb.format(pmax=t.pmax, sbuf=t.sbuf_bytes_per_partition,
                                                             psum=t.psum_bytes_per_partition,
                                                             stat=t.gemm_stationary_fmax, mov=t.gemm_moving_fmax,
                                                             target=t.name) for d in docs)
    return f"lookup: nothing found for {q!r} (try an error code, nl.<name>, nisa.<name>, 'limits', 'example <op>')"


def _examples(op: str) -> str:
    if not os.path.isdir(EXAMPLES_DIR):
        return "lookup: no example kernels are installed"
    names = sorted(n for n in os.listdir(EXAMPLES_DIR) if os.path.isdir(os.path.join(EXAMPLES_DIR, n)))
    hits = [n for n in names if op and op.lower() in n.lower()]
    if not hits:
        return "example kernels: " + ", ".join(names) + " (ask 'example <name>')"
    folder = os.path.join(EXAMPLES_DIR, hits[0])
    parts = []
    for fname in ("kernel_new.py", "kernel_classic.py"):
        p = os.path.join(folder, fname)
        if os.path.isfile(p):
            with open(p, encoding="utf-8") as fh:
                parts.append(f"# {hits[0]}/{fname}\n{fh.read()}")
    return "\n\n".join(parts) or f"example {hits[0]} has no kernel files"
