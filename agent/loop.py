"""The compile → verify → fix loop: one function, ``run_agent``, readable in one sitting.

1. Verify the user's kernel as it is (no model call if it already verifies).
2. Each turn: the router's current backend sees the system prompt (rank-aware, from the task's real
   inputs), the conversation and the tools; its tool calls run on the candidate (``tools.ToolBox``).
3. Stop at the first verified kernel, when a budget is spent, on cancel, or when every tier gave up.
4. Every step goes to the trajectory. The result is one minimal edit against the snapshot the run
   started from — the caller applies it only if the document has not changed since.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from ..toolchain import api
from nki_agent.toolchain.protocol.jobs import VerifyResult
from . import prompts
from .budget import Budget
from .protocol import (
    BackendError,
    Message,
    ModelBackend,
    ModelReply,
    ModelRequest,
    ToolCall,
    ToolResult,
    Usage,
    Workspace,
)
from .router import Router
from .snapshot import Edit, Snapshot, minimal_edit, unified_diff
from .tools import Profiler, TamperError, ToolBox, ToolOutcome
from .trajectory import Trajectory, default_dir

Verdict = Literal["verified", "already_correct", "unverified", "cancelled", "budget", "error"]
_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
DESCRIBE_TIMEOUT = 60.0  # seconds to load the task and draw its inputs once (torch import dominates)
MAX_CALLS_PER_TURN = 8  # tool calls run per model reply; more is a runaway model, not diligence
TRUSTED_SANDBOXES = ("bwrap", "in-process")  # toolchain.jail.JAIL, toolchain.api.IN_PROCESS


@dataclass
class AgentConfig:
    max_turns: int = 10
    max_tokens: int = 400_000
    max_dollars: float = 5.0
    max_seconds: float = 900.0
    seeds: int = 3  # verification seeds: one seed lets a lucky kernel through (a Kernel Forge weakness)
    target: str | None = None
    sdk_generation: str = ""
    stream: bool = True
    max_output_tokens: int = 8192
    trajectory_dir: str | None = field(default_factory=default_dir)  # None: keep the trajectory in memory only
    profiler: Profiler | None = None
    prefer_toolchain: str = "auto"  # auto: the real Neuron SDK when installed, else the embedded toolchain
    tool_timeout: float = 120.0
    isolate: bool = True  # run candidates in the sandboxed worker; False only in tests and benchmarks


@dataclass
class Event:
    """Progress for the editor / CLI: what the agent is doing and what it has cost so far."""

    kind: str  # start | turn | text | tool | result | route | done
    message: str
    turn: int = 0
    tool: str = ""
    dollars: float = 0.0
    tokens: int = 0


@dataclass
class AgentResult:
    verdict: Verdict
    reason: str
    snapshot: Snapshot
    final_text: str
    edit: Edit | None
    diff: str
    turns: int
    usage: Usage
    dollars: float
    seconds: float
    routes: list[str]
    trajectory: str | None
    verify: VerifyResult | None = None  # the last verification of the run
    sandbox: str = ""  # how the verification behind the verdict ran: bwrap, unsandboxed or in-process

    @property
    def ok(self) -> bool:
        return self.verdict in ("verified", "already_correct")

    def trusted(self, trust_local: bool = False) -> bool:
        """May this result be applied, recorded as verified and exported? Only if it was verified in the
        OS jail (or in-process, which only tests and benchmarks choose), or the user trusts the machine."""
        return self.ok and (self.sandbox in TRUSTED_SANDBOXES or trust_local)

    def refusal(self) -> str:
        return (f"verified {self.sandbox or 'outside the sandbox'} (no OS sandbox on this machine): not applied — "
                "pass --trust-local (CLI) or set nkiAgent.trustLocal to accept kernels verified without it")

    def summary(self) -> str:
        cost = f"{self.turns} turn(s), {self.usage.total} tokens, ${self.dollars:.4f}, {self.seconds:.1f} s"
        text = {"verified": "verified correct", "already_correct": "already verifies; nothing to change"}.get(
            self.verdict, f"not fixed ({self.verdict})")
        out = f"{text} — {self.reason} [{cost}]" if self.reason else f"{text} [{cost}]"
        return out + "".join(f"\nrouted: {r}" for r in self.routes)


def run_agent(snapshot: Snapshot, path: str, task_path: str, router: Router | ModelBackend,
              config: AgentConfig | None = None, *, self_task: bool = False,
              cancel: threading.Event | None = None, on_event: Callable[[Event], None] | None = None) -> AgentResult:
    """Repair the kernel in ``snapshot`` (shown as ``path``) until it verifies against ``task_path``."""
    cfg = config or AgentConfig()
    route = router if isinstance(router, Router) else Router([router])
    cancel = cancel or threading.Event()
    budget = Budget(cfg.max_turns, cfg.max_tokens, cfg.max_dollars, cfg.max_seconds)
    traj = Trajectory(cfg.trajectory_dir, path)
    tools = ToolBox(path, snapshot.text, task_path, self_task=self_task, target=cfg.target,
                    sdk_generation=cfg.sdk_generation, seeds=cfg.seeds, profiler=cfg.profiler, cancel=cancel,
                    prefer_toolchain=cfg.prefer_toolchain, timeout=cfg.tool_timeout, isolate=cfg.isolate)

    def emit(kind: str, message: str, tool: str = "") -> None:
        if on_event is not None:
            try:
                on_event(Event(kind, message, budget.turns, tool, budget.dollars, budget.usage.total))
            except Exception:  # noqa: BLE001 - a broken progress sink must not break the run
                pass

    def finish(verdict: Verdict, reason: str) -> AgentResult:
        final = tools.verified_code if tools.verified_code is not None else tools.code
        edit = minimal_edit(snapshot.text, final) if verdict == "verified" else None
        diff = unified_diff(snapshot.text, final, path.rsplit("/", 1)[-1]) if final != snapshot.text else ""
        last = tools.last_verify
        sandbox = last.sandbox if last is not None and verdict in ("verified", "already_correct") else ""
        res = AgentResult(verdict, reason, snapshot, final, edit, diff, budget.turns, budget.usage, budget.dollars,
                          budget.elapsed, list(route.reasons), traj.path, tools.last_verify, sandbox)
        traj.write("verdict", verdict=verdict, reason=reason, diff=diff, final=final, turns=budget.turns,
                   tokens=vars(budget.usage), dollars=budget.dollars, seconds=round(budget.elapsed, 3),
                   sandbox=sandbox)
        emit("done", res.summary())
        return res

    try:
        emit("start", f"agent on {path.rsplit('/', 1)[-1]} with {route.label}")
        traj.write("config", kernel=path, task=task_path, self_task=self_task, uri=snapshot.uri,
                   version=snapshot.version, backends=[f"{b.name}:{b.model}" for b in route.tiers],
                   budget={"turns": cfg.max_turns, "tokens": cfg.max_tokens, "dollars": cfg.max_dollars,
                           "seconds": cfg.max_seconds}, seeds=cfg.seeds, target=cfg.target, original=snapshot.text)
        emit("tool", "verifying the kernel as it is", "verify")
        _bound(tools, budget, cfg.tool_timeout)
        first = tools.verify(snapshot.text)
        traj.write("tool", name="verify", arguments={}, content=first.content, initial=True, verified=first.verified,
                   sandbox=first.sandbox)
        if first.verified:
            return finish("already_correct", "the kernel already verifies")
        if cancel.is_set():
            return finish("cancelled", "cancelled")
        desc = api.describe_task(tools.task_path, isolate=cfg.isolate, timeout=min(DESCRIBE_TIMEOUT, tools.timeout),
                                 search_path=tools.search_path)
        generation = "classic" if re.search(r"^\s*(from|import) neuronxcc", snapshot.text, re.MULTILINE) else "new"
        system = prompts.system_prompt(desc, generation, cfg.target, cfg.seeds, cfg.max_turns)
        user = prompts.task_message(path, snapshot.text, first.content)
        traj.write("system", text=system)
        traj.write("user", text=user)
        messages = [Message("user", user)]
        best_errors = _errors(tools)
        nudged = False
        while True:
            if cancel.is_set():
                return finish("cancelled", "cancelled by the user")
            spent = budget.exceeded()
            if spent:
                return finish("budget", f"stopped: {spent} spent")
            backend = route.current
            ws = Workspace(tools.code, path, tools.task_path, list(tools.diagnostics), tools.verified_code is not None,
                           cfg.target, cfg.sdk_generation, snapshot.text, list(first.diagnostics))
            req = ModelRequest(system, messages, tools.specs(), cfg.max_output_tokens, None, cfg.stream,
                               lambda t: emit("text", t), cancel, ws)
            emit("turn", f"turn {budget.turns + 1}: asking {route.label}")
            try:
                reply = backend.complete(req)
            except BackendError as e:
                traj.write("backend_error", backend=route.label, error_kind=e.kind, message=str(e), status=e.status)
                if e.kind == "cancelled" or cancel.is_set():
                    return finish("cancelled", "cancelled by the user")
                why = route.escalate(f"{e.kind} error: {e}")
                if why is None:
                    return finish("error", f"{route.label} failed: {e}")
                traj.write("route", reason=why)
                emit("route", why)
                continue
            budget.turns += 1
            budget.charge(reply.model or backend.model, backend.name, reply.usage)
            traj.write("assistant", backend=route.label, model=reply.model, text=reply.text,
                       tool_calls=[vars(c) for c in reply.tool_calls], stop_reason=reply.stop_reason,
                       usage=vars(reply.usage), retries=reply.retries, dollars=budget.dollars)
            calls = list(reply.tool_calls)
            implicit = False
            if not calls:
                code = _code_in(reply.text)
                if code is not None:  # a model that answers with a code block instead of a tool call
                    calls, implicit = [ToolCall("implicit", "verify", {"code": code})], True
            messages.append(Message("assistant", reply.text, [] if implicit else calls))
            if not calls:
                if backend.name != "rules" and not nudged:
                    nudged = True
                    messages.append(Message("user", prompts.nudge()))
                    traj.write("user", text=messages[-1].text)
                    continue
                why = route.escalate(f"gave up: {reply.text.strip()[:160] or 'no tool call'}")
                if why is None:
                    return finish("unverified", f"{route.label} stopped without a verified kernel: "
                                                f"{reply.text.strip()[:300]}")
                nudged = False
                traj.write("route", reason=why)
                emit("route", why)
                continue
            results, verified, verifies = _run_calls(calls, tools, traj, budget, emit, cancel, cfg.tool_timeout)
            if verifies:  # the router hears about each reply once, however many verifies it made
                why = route.record_verify(verified, _errors(tools) < best_errors)
                if why:
                    traj.write("route", reason=why)
                    emit("route", why)
            best_errors = min(best_errors, _errors(tools))
            if implicit:
                messages.append(Message("user", "Result of verifying the code in your message:\n" + results[0].content))
                traj.write("user", text=messages[-1].text)
            else:
                messages.append(Message("user", tool_results=results))
            if verified:
                return finish("verified", f"verified on {cfg.seeds} seeds by {route.label}")
    except TamperError as e:
        return finish("error", f"run void: {e}")
    finally:
        tools.close()


def _run_calls(calls: list[ToolCall], tools: ToolBox, traj: Trajectory, budget: Budget,
               emit: Callable[..., None], cancel: threading.Event,
               tool_timeout: float) -> tuple[list[ToolResult], bool, int]:
    """Run one reply's tool calls in order; (results, any verified, verifications run). Every call gets a
    result (the APIs require one per call), even those skipped for a verified kernel, cancel or budget."""
    results: list[ToolResult] = []
    verified = False
    verifies = 0
    for k, call in enumerate(calls):
        spent = budget.exceeded() if k else None  # the turn that made the calls is already counted
        skip = ("a kernel already verified" if verified else "cancelled" if cancel.is_set() else
                f"{spent} spent" if spent and "turn" not in spent else
                f"at most {MAX_CALLS_PER_TURN} tool calls per turn" if k >= MAX_CALLS_PER_TURN else "")
        if skip:
            results.append(ToolResult(call.id, f"not run: {skip}", True))
            traj.write("tool", name=call.name, id=call.id, arguments=call.arguments, content=results[-1].content,
                       is_error=True, verified=False, skipped=True)
            continue
        emit("tool", f"running {call.name}", call.name)
        t0 = time.monotonic()
        _bound(tools, budget, tool_timeout)
        try:
            outcome = tools.run(call)
        except TamperError:
            raise
        except Exception as e:  # noqa: BLE001 - a tool's own failure is the model's information, not a crash
            outcome = ToolOutcome(f"{call.name} failed inside the toolchain: {type(e).__name__}: {e}"[:2000],
                                  is_error=True, ran=call.name)
        results.append(ToolResult(call.id, outcome.content, outcome.is_error))
        traj.write("tool", name=call.name, id=call.id, arguments=call.arguments, content=outcome.content,
                   is_error=outcome.is_error, verified=outcome.verified, seconds=round(time.monotonic() - t0, 3),
                   codes=[d.code for d in outcome.diagnostics], sandbox=outcome.sandbox)
        emit("result", outcome.content.split("\n", 1)[0], call.name)
        verifies += outcome.ran == "verify"
        verified = verified or outcome.verified
    return results, verified, verifies


def _bound(tools: ToolBox, budget: Budget, tool_timeout: float) -> None:
    """No single tool run may outlive the run's time budget (the first verification included)."""
    if budget.max_seconds:
        tools.timeout = max(1.0, min(tool_timeout, budget.max_seconds - budget.elapsed))


def _errors(tools: ToolBox) -> int:
    return sum(1 for d in tools.diagnostics if d.severity == "error")


def _code_in(text: str) -> str | None:
    blocks = [b for b in _CODE_BLOCK.findall(text or "") if "def " in b]
    return max(blocks, key=len) if blocks else None


__all__ = ["AgentConfig", "AgentResult", "Event", "ModelReply", "run_agent"]
