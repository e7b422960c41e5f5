"""Builds the agent's prompts from the template files in ``agent/prompts/`` and the task's real facts.

The system prompt is rank-aware: it lists each input's real shape and dtype (from running the
task's ``get_inputs`` in the sandbox), the target's limits and the API generation's conventions,
then the pre-flight checklist. Templates use ``string.Template`` ``$names``; editing a prompt never
means editing code.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from string import Template

from nki_agent.toolchain.protocol.jobs import TaskDescription
from nki_agent.toolchain.facts.targets import get_target

DEFAULT_TOLERANCE = (1e-4, 1e-4)  # verify's fp32 default when the task sets none


@cache
def template(name: str) -> Template:
    text = resources.files(__package__).joinpath("prompts", f"{name}.md").read_text(encoding="utf-8")
    return Template(text)


def describe_inputs(task: TaskDescription) -> str:
    rows = []
    for k, x in enumerate(task.inputs):
        if x.shape is None:
            rows.append(f"- input {k}: a Python {x.dtype} ({x.value or ''})")
        else:
            rows.append(f"- input {k}: shape {tuple(x.shape)} (rank {len(x.shape)}), dtype {x.dtype}")
    return "\n".join(rows) or "- (the task's inputs could not be determined)"


def system_prompt(task: TaskDescription, generation: str, target: str | None, seeds: int, max_turns: int) -> str:
    t = get_target(target or task.target or ("trn1" if generation == "classic" else "trn3"))
    tol = task.tolerance
    launch = []
    if task.grid:
        launch.append(f"Classic launch: SPMD grid {tuple(task.grid)} (`kernel[grid](...)`).")
    if task.lnc:
        launch.append(f"New-API launch: `kernel[{task.lnc}](...)` (logical NeuronCore degree {task.lnc}).")
    if task.kernel_name:
        launch.append(f"The kernel function is `{task.kernel_name}`.")
    return template("system").substitute(
        target=t.name, inputs=describe_inputs(task), reference=task.reference or "reference", seeds=seeds,
        atol=tol.get("atol", "per-dtype default"), rtol=tol.get("rtol", "per-dtype default"),
        launch="\n".join(launch), generation="classic (neuronxcc.nki)" if generation == "classic" else "new (nki)",
        api_notes=template("api_classic" if generation == "classic" else "api_new").template.strip(),
        pmax=t.pmax, sbuf=t.sbuf_bytes_per_partition, psum=t.psum_bytes_per_partition, psum_banks=t.psum_banks,
        psum_bank=t.psum_bank_bytes, stat=t.gemm_stationary_fmax, mov=t.gemm_moving_fmax, max_turns=max_turns,
        checklist=template("checklist").template.strip())


def task_message(path: str, code: str, status: str) -> str:
    return template("task").substitute(path=path, code=code.rstrip("\n"), status=status)


def nudge() -> str:
    return template("nudge").template.strip()
