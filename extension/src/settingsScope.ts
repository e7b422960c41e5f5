// Where a command writes a setting it changes (Select target, Select runner), and the words that tell
// the user so — a command never writes a settings file silently. Machine-scoped settings always go to
// the user settings (machineSettings.ts: a workspace's value of them is never read). Any other setting
// goes to the layer its effective value comes from, so the write is not shadowed (a workspace's
// `nkiAgent.verifyOnSave` would win over a user-level write); when no layer sets it, to the command's
// preferred layer (the workspace for the target, which is a property of the project; the user
// settings for what goes with the runner, which is a property of the machine).
import * as path from 'path';
import * as vscode from 'vscode';
import { Inspected, isMachineSetting } from './machineSettings';

/** The workspace as far as settings files go: its `.code-workspace` file (if any) and its folders. */
export interface WorkspaceShape {
  file?: { scheme: string; fsPath: string };
  folders: readonly { uri: { fsPath: string } }[];
}

export function currentWorkspace(): WorkspaceShape {
  return { file: vscode.workspace.workspaceFile, folders: vscode.workspace.workspaceFolders ?? [] };
}

/** The layer to write `key` to (`inspected`: its `inspect()`), `preferred` when no layer sets it. */
export function writeTarget(key: string, inspected: Inspected | undefined, ws: WorkspaceShape,
  preferred: 'user' | 'workspace'): vscode.ConfigurationTarget {
  if (isMachineSetting(key) || ws.folders.length === 0) {
    return vscode.ConfigurationTarget.Global;
  }
  if (inspected?.workspaceValue !== undefined) {
    return vscode.ConfigurationTarget.Workspace;
  }
  if (inspected?.globalValue !== undefined) {
    return vscode.ConfigurationTarget.Global;
  }
  return preferred === 'workspace' ? vscode.ConfigurationTarget.Workspace : vscode.ConfigurationTarget.Global;
}

/** Where a write to `target` lands, for a message: "your user settings", "/ws/.vscode/settings.json", ... */
export function describeTarget(target: vscode.ConfigurationTarget, ws: WorkspaceShape): string {
  if (target === vscode.ConfigurationTarget.Global || ws.folders.length === 0) {
    return 'your user settings';
  }
  if (target === vscode.ConfigurationTarget.Workspace && ws.file !== undefined) {
    return ws.file.scheme === 'file' ? `the workspace file ${ws.file.fsPath}` : 'the (untitled) workspace\'s settings';
  }
  return path.join(ws.folders[0].uri.fsPath, '.vscode', 'settings.json');
}
