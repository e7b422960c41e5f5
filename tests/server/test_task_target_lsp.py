"""One target per document: with ``nkiAgent.target`` "auto", a task that declares ``TARGET`` is what the
static check, the simulation and the hovers all use (not the API generation's default)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytest_lsp import LanguageClient
from server_helpers import open_doc, wait_publish
from test_hover_facts_lsp import NEW_API_BF16_PSUM, hover, save_and_simulate

pytestmark = pytest.mark.asyncio

CODE = "sim_unsupported_dtype"  # a bf16 PSUM accumulator: trn3 has it, trn1 does not


@pytest.mark.parametrize("where", ["own", "sibling"])
async def test_a_task_target_is_checked_simulated_and_shown(client: LanguageClient, tmp_path: Path,
                                                            where: str) -> None:
    # the new-API kernel alone is checked and simulated on trn3 (its generation's default): no error there
    if where == "own":  # the kernel file is its own task
        text = NEW_API_BF16_PSUM.replace("import nki\n", 'import nki\n\nTARGET = "trn1"\n', 1)
    else:  # a sibling task.py declares it
        text = NEW_API_BF16_PSUM
        body = NEW_API_BF16_PSUM.split("@nki.jit")[0]
        (tmp_path / "task.py").write_text(body + '\nTARGET = "trn1"\n')
        text = text.replace(body, "import nki\nimport nki.isa as nisa\nimport nki.language as nl\n\n\n", 1)
    uri = open_doc(client, tmp_path / "bf16_acc.py", text)
    (tmp_path / "bf16_acc.py").write_text(text)
    pub = await wait_publish(client, uri, 1)
    static = [d.code for d in pub.diagnostics if d.source == "nki-check"]
    assert static == [CODE], static  # checked against the task's trn1
    md = await hover(client, uri, text, "acc = ", 1)
    assert "trn1 capacity" in md, md
    await save_and_simulate(client, uri)
    pubs = [p for p in client.published if p.uri == uri]  # type: ignore[attr-defined]
    codes = {d.code for d in pubs[-1].diagnostics}
    assert codes == {CODE}, codes  # the simulation on trn1 finds the same problem (published once)
