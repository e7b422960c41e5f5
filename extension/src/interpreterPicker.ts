// "Select interpreter": the Python extension's own picker when ms-python is installed, else a quick
// pick of the Pythons found (workspace virtual environments, PATH) plus "Browse…". The choice is kept
// in the extension's workspace state (this workspace only; VS Code's storage, not a settings file a
// repository could ship), which discovery reads first. The nkiAgent.interpreter setting is machine-scoped
// (user settings only), so the picker never writes it.
import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';
import { INTERPRETER_SETTING, SECTION } from './ids';
import { PATH_NAMES, whichOnPath } from './interpreter';
import { userValue } from './machineSettings';
import { PythonExtension } from './pythonExtension';

const VENV_DIRS = ['.venv', 'venv', 'env'];

/** Interpreters worth offering: workspace virtual environments first, then PATH (no duplicates). */
export async function candidates(folders: readonly string[], env: NodeJS.ProcessEnv = process.env,
  exists: (p: string) => boolean = fs.existsSync): Promise<string[]> {
  const out: string[] = [];
  const bin = process.platform === 'win32' ? path.join('Scripts', 'python.exe') : path.join('bin', 'python');
  for (const f of folders) {
    for (const d of VENV_DIRS) {
      const p = path.join(f, d, bin);
      if (exists(p) && !out.includes(p)) {
        out.push(p);
      }
    }
  }
  for (const name of PATH_NAMES) {
    const p = await whichOnPath(name, env);
    if (p && !out.includes(p)) {
      out.push(p);
    }
  }
  return out;
}

export const PICKED_KEY = 'nkiAgent.pickedInterpreter';

/** Where a choice is kept when the setting cannot be written. */
export interface PickStore {
  get(key: string): string | undefined;
  update(key: string, value: string | undefined): Thenable<void>;
}

/** Stores the choice for this workspace ('' forgets it: discovery falls through to the user setting,
 *  the Python extension, PATH). */
export async function storeInterpreter(value: string, state: PickStore): Promise<'state'> {
  await state.update(PICKED_KEY, value || undefined);
  return 'state';
}

export async function selectInterpreter(python: PythonExtension, state: PickStore): Promise<void> {
  const folders = (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath);
  type Item = vscode.QuickPickItem & { value: string };
  const items: Item[] = [];
  if (python.installed()) {
    items.push({ label: '$(symbol-namespace) Use the Python extension\'s interpreter', description: 'python.setInterpreter',
      value: 'python-extension' });
  }
  for (const c of await candidates(folders)) {
    items.push({ label: c, value: c });
  }
  items.push({ label: '$(folder-opened) Browse…', value: 'browse' });
  const cfg = vscode.workspace.getConfiguration(SECTION);
  const current = state.get(PICKED_KEY) || userValue<string>((k) => cfg.inspect(k), INTERPRETER_SETTING);
  const pick = await vscode.window.showQuickPick(items, {
    title: 'NKI Agent: Python interpreter for the language server (3.11 or newer)',
    placeHolder: current ? `now: ${current}` : 'now: found automatically',
  });
  if (pick === undefined) {
    return;
  }
  if (pick.value === 'python-extension') {
    await storeInterpreter('', state); // fall through to the Python extension's environment
    await vscode.commands.executeCommand('python.setInterpreter');
    return;
  }
  if (pick.value === 'browse') {
    const uris = await vscode.window.showOpenDialog({ canSelectMany: false, openLabel: 'Use this Python',
      title: 'NKI Agent: Python interpreter' });
    if (!uris?.length) {
      return;
    }
    await storeInterpreter(uris[0].fsPath, state);
    return;
  }
  await storeInterpreter(pick.value, state);
}
