"""The mutation suite (agent/mutations.py): deterministic ids, every operator has a site and makes valid
Python that differs at the reported line, ``keep_broken`` keeps what does not verify and records how it
failed, and a small fixed sample (one mutant per operator) is really broken in the sandboxed simulator."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from nki_agent.agent import mutations as mu
from nki_agent.toolchain import api
from nki_agent.toolchain.protocol.jobs import VerifyResult

# What the sample's first mutant of each operator must be diagnosed as: the documented ids the embedded
# toolchain raises for that bug (the other operators' bugs surface in several ways, see --check).
DIAGNOSED = {"arange_1d", "drop_store", "partition_256", "psum_store", "shared_hbm_in_loop", "mixed_indexing",
             "bool_and"}


TORCH_TASKS = {"l1_gelu", "l1_relu"}  # their torch `Model` reference costs ~9 s of import per verification


@pytest.fixture(scope="module")
def suite() -> list[mu.Mutant]:
    return mu.mutants()


def test_ids_are_deterministic_and_unique(suite: list[mu.Mutant]) -> None:
    again = mu.mutants()
    assert [(m.id, m.text, m.line) for m in again] == [(m.id, m.text, m.line) for m in suite]
    assert len({m.id for m in suite}) == len(suite)
    assert 60 <= len(suite) <= 150
    for m in suite:
        task, api, op, k = m.id.split("/")
        assert (task, f"kernel_{api}.py", op) == (Path(m.kernel_path).parent.name, Path(m.kernel_path).name,
                                                   m.operator)
        assert k.isdigit() and Path(m.task_path) == Path(m.kernel_path).parent / "task.py"


@pytest.mark.parametrize("op", mu.operators(), ids=lambda o: o.name)
def test_operator_makes_valid_mutants(op: mu.Operator, suite: list[mu.Mutant]) -> None:
    mine = [m for m in suite if m.operator == op.name]
    assert mine, f"{op.name} has no site in any example"
    assert len(mine) <= mu.MAX_PER_OPERATOR
    for m in mine:
        original = Path(m.kernel_path).read_text(encoding="utf-8")
        assert m.text != original
        ast.parse(m.text)  # no operator is a syntax-level one
        old, new = original.splitlines(), m.text.splitlines()
        assert 1 <= m.line <= len(new)
        assert m.line > len(old) or new[m.line - 1] != old[m.line - 1], f"{m.id}: line {m.line} unchanged"
        assert m.expected_class and m.description


def test_per_kernel_bound_and_operator_selection() -> None:
    one = mu.mutants(operators=["off_by_one"], per_kernel=1, per_operator=1000)
    assert {m.operator for m in one} == {"off_by_one"}
    assert len({m.kernel_path for m in one}) == len(one)  # at most one site per kernel
    assert len(mu.mutants(operators=["off_by_one"], per_kernel=2, per_operator=1000)) > len(one)


def test_limit_keeps_a_sample_of_every_operator() -> None:
    sample = mu.mutants(limit=len(mu.operators()))
    assert [m.operator for m in sample] == [op.name for op in mu.operators()]


def test_unknown_operator_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown mutation operator"):
        mu.mutants(operators=["no_such_operator"])
    with pytest.raises(SystemExit):
        mu.main(["--list", "--operator", "no_such_operator"])


def test_list_prints_the_suite(capsys: pytest.CaptureFixture[str]) -> None:
    assert mu.main(["--list", "--operator", "drop_store"]) == 0
    out = capsys.readouterr().out
    assert "l1_add/classic/drop_store/0" in out and "err_tensor_output_not_written_to" in out


def test_keep_broken_records_the_observed_class(suite: list[mu.Mutant]) -> None:
    picked = suite[:4]
    replies = [VerifyResult.model_validate(r) for r in (
        {"correct": True, "problems": []},  # an equivalent mutant: dropped
        {"correct": False, "problems": [{"code": "err_stack_overflow_psum", "message": "", "severity": "warning"},
                                        {"code": "err_unsupported_memory", "message": "", "severity": "error"}]},
        {"correct": False, "compiled": True, "problems": []},
        {"correct": False, "problems": [{"code": "err_stack_overflow_sbuf", "message": "", "severity": "warning"}]},
    )]
    seen: dict[str, str] = {}

    def fake_verify(kernel: str, task: str) -> VerifyResult:
        m = next(m for m in picked if Path(kernel).read_text(encoding="utf-8") == m.text)
        assert Path(kernel) != Path(m.kernel_path) and task == m.task_path
        assert (Path(kernel).parent.name, Path(kernel).name) == (Path(m.kernel_path).parent.name,
                                                                 Path(m.kernel_path).name)
        seen[m.id] = kernel
        return replies[picked.index(m)]

    kept = mu.keep_broken(picked, verify=fake_verify, jobs=1)
    assert [m.id for m in kept] == [m.id for m in picked[1:]]
    assert [m.observed for m in kept] == ["err_unsupported_memory", mu.WRONG_RESULT, "err_stack_overflow_sbuf"]
    assert len(seen) == 4 and not any(Path(p).exists() for p in seen.values())  # temp copies cleaned up


def _one_seed(kernel: str, task: str) -> VerifyResult:
    return api.verify(kernel, task, seeds=1)


def test_sample_is_broken_in_the_simulator(suite: list[mu.Mutant]) -> None:
    """The first mutant of each operator outside the torch tasks, verified for real (sandboxed worker)."""
    sample = [next(m for m in suite if m.operator == op.name and m.id.split("/")[0] not in TORCH_TASKS)
              for op in mu.operators()]
    kernel = Path(sample[0].kernel_path).parent.parent / "l2_matmul" / "kernel_new.py"
    original = mu.Mutant("l2_matmul/new/none/0", "none", str(kernel), str(kernel.parent / "task.py"),
                         kernel.read_text(encoding="utf-8"), 1, "unmutated", "")
    kept = mu.keep_broken([*sample, original], verify=_one_seed, jobs=2)
    assert [m.id for m in kept] == [m.id for m in sample], "an unmutated kernel is not broken; every mutant is"
    wrong = {m.id: (m.expected_class, m.observed) for m in kept
             if m.operator in DIAGNOSED and m.observed != m.expected_class}
    assert not wrong
