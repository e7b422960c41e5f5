// "Install NKI Agent into this interpreter": pip-installs the server package into the selected Python
// with a cancellable progress notification and pip's output in the log. The source is, first found:
// the source checkout the extension runs from, the wheel bundled in the .vsix, else the package index.
import { spawn } from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';
import { PACKAGE_NAME } from './ids';
import { Log } from './log';

/** What pip installs: a checkout folder (has pyproject.toml), a bundled wheel, or the index name. */
export function installSource(extensionRoot: string, exists: (p: string) => boolean = fs.existsSync,
  list: (dir: string) => string[] = (d) => (fs.existsSync(d) ? fs.readdirSync(d) : [])): string {
  if (exists(path.join(extensionRoot, 'pyproject.toml'))) {
    return extensionRoot;
  }
  const wheels = path.join(extensionRoot, 'extension', 'wheels');
  const wheel = list(wheels).filter((f) => /^nki_agent-.*\.whl$/.test(f)).sort().pop();
  return wheel ? path.join(wheels, wheel) : PACKAGE_NAME;
}

export function pipArgs(source: string): string[] {
  return ['-m', 'pip', 'install', '--disable-pip-version-check', '--no-input', source];
}

export type InstallOutcome = { ok: true } | { ok: false; cancelled: boolean; message: string };

/** The one-line reason of a failed pip run, from its output. */
export function pipFailure(output: string, exitCode: number | null): string {
  if (/externally-managed-environment/.test(output)) {
    return 'this Python is managed by the system (PEP 668); create a virtual environment (python3 -m venv .venv) and select it';
  }
  if (/No module named pip/.test(output)) {
    return 'this Python has no pip (python3 -m ensurepip, or a virtual environment)';
  }
  const err = output.split(/\r?\n/).filter((l) => /^ERROR:/.test(l)).pop();
  return err ?? `pip exited with code ${exitCode}`;
}

export async function installServer(python: string, source: string, log: Log, cwd?: string): Promise<InstallOutcome> {
  return vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: `Installing NKI Agent into ${python}`, cancellable: true },
    (progress, token) => new Promise<InstallOutcome>((resolve) => {
      const args = pipArgs(source);
      log.info(`install: ${python} ${args.join(' ')}`);
      const child = spawn(python, args, { cwd, windowsHide: true });
      let output = '';
      let cancelled = false;
      const onData = (buf: Buffer) => {
        const text = buf.toString();
        output = (output + text).slice(-64_000);
        for (const line of text.split(/\r?\n/)) {
          if (line.trim()) {
            log.info(`pip: ${line}`);
            progress.report({ message: line.trim().slice(0, 100) });
          }
        }
      };
      child.stdout.on('data', onData);
      child.stderr.on('data', onData);
      const sub = token.onCancellationRequested(() => {
        cancelled = true;
        child.kill();
      });
      child.on('error', (e) => {
        sub.dispose();
        resolve({ ok: false, cancelled: false, message: e.message });
      });
      child.on('close', (code) => {
        sub.dispose();
        if (code === 0 && !cancelled) {
          resolve({ ok: true });
        } else {
          resolve({ ok: false, cancelled, message: cancelled ? 'cancelled' : pipFailure(output, code) });
        }
      });
    }),
  );
}
