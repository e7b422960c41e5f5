// The palette commands. Server work goes through the server's own workspace/executeCommand names
// (nki.verify, nki.explainError, nki.fixKernel); these add what only the editor knows: the active
// document, the diagnostic under the cursor, quick picks for target and runner, secrets.
import * as vscode from 'vscode';
import { AgentRuns } from './agentRuns';
import { Decision, FixPreview, fileName } from './fixPreview';
import { COMMANDS, SECTION, SERVER_COMMANDS, TARGETS, isServerDiagnosticSource } from './ids';
import { KernelReportPanels } from './kernelReport';
import { userValue } from './machineSettings';
import { verifyOnSaveWith } from './runner';
import { ANTHROPIC_KEY, RUNNER_TOKEN, Secrets, chainNeedsAnthropicKey } from './secrets';
import { Session } from './session';
import { currentWorkspace, describeTarget, writeTarget } from './settingsScope';

export interface CommandDeps {
  session: Session;
  secrets: Secrets;
  showLog(): void;
  selectInterpreter(): Promise<void>;
  install(): Promise<void>;
  /** Recent runner URLs (kept in globalState). */
  recentRunners(): string[];
  rememberRunner(url: string): Thenable<void>;
  /** Agent runs' progress notifications and spend. */
  agent: Pick<AgentRuns, 'begin' | 'end' | 'running'>;
  /** The open agent-fix diff preview. */
  preview: Pick<FixPreview, 'decide' | 'open'>;
  reports: Pick<KernelReportPanels, 'show'>;
}

/** The code of a VS Code diagnostic as the server's id (string codes, or `{value}` objects). */
export function diagnosticCode(d: vscode.Diagnostic): string | undefined {
  const c = d.code;
  if (c === undefined) {
    return undefined;
  }
  return typeof c === 'object' ? String(c.value) : String(c);
}

/** The server's diagnostics at `pos` (all of the file's when none is there). */
export function diagnosticsFor(all: readonly vscode.Diagnostic[], pos: vscode.Position | undefined): vscode.Diagnostic[] {
  const ours = all.filter((d) => isServerDiagnosticSource(d.source) && diagnosticCode(d) !== undefined);
  const here = pos === undefined ? [] : ours.filter((d) => d.range.contains(pos));
  return here.length ? here : ours;
}

function pythonEditor(): vscode.TextEditor | undefined {
  const ed = vscode.window.activeTextEditor;
  if (ed === undefined || ed.document.languageId !== 'python') {
    void vscode.window.showInformationMessage('NKI Agent: open a kernel (a Python file) first.');
    return undefined;
  }
  return ed;
}

/** A machine-scoped setting's value at user level (machineSettings.ts: never a workspace's). */
function userSetting<T>(key: string): T | undefined {
  const cfg = vscode.workspace.getConfiguration(SECTION);
  return userValue<T>((k) => cfg.inspect(k), key);
}

/** The one message for a command while the server is down, with its way out. */
async function serverDown(deps: CommandDeps): Promise<void> {
  const choice = await vscode.window.showWarningMessage(
    `NKI Agent: the language server is not running (${deps.session.state}).`, 'Show log', 'Restart');
  if (choice === 'Show log') {
    deps.showLog();
  } else if (choice === 'Restart') {
    await deps.session.restartNow();
  }
}

async function runOnServer(deps: CommandDeps, command: string, args: unknown[]): Promise<unknown> {
  const conn = deps.session.connection;
  if (conn === undefined) {
    await serverDown(deps);
    return undefined;
  }
  try {
    return await conn.executeCommand(command, args);
  } catch (e) {
    void vscode.window.showErrorMessage(`NKI Agent: ${command} failed: ${e instanceof Error ? e.message : String(e)}`);
    return undefined;
  }
}

/** Before an agent run: a chain naming Anthropic needs a key (stored, or in the editor's environment). */
export async function missingAnthropicKey(chain: string, secrets: Secrets, env: NodeJS.ProcessEnv): Promise<boolean> {
  return chainNeedsAnthropicKey(chain) && !env[ANTHROPIC_KEY.env] && !(await secrets.has(ANTHROPIC_KEY));
}

export async function fixKernel(deps: CommandDeps): Promise<void> {
  const ed = pythonEditor();
  if (ed === undefined) {
    return;
  }
  const chain = userSetting<string>('modelBackend') ?? 'rules';
  if (await missingAnthropicKey(chain, deps.secrets, process.env)) {
    const choice = await vscode.window.showWarningMessage(
      `NKI Agent: the model backend "${chain}" needs an Anthropic API key, and none is set.`,
      'Set Anthropic API key', 'Use the rules backend');
    if (choice === 'Set Anthropic API key') {
      await vscode.commands.executeCommand(COMMANDS.setAnthropicApiKey);
    } else if (choice === 'Use the rules backend') {
      await vscode.workspace.getConfiguration(SECTION).update('modelBackend', 'rules', vscode.ConfigurationTarget.Global);
    }
    return; // the server restarts with the key / the new chain: the user runs the fix again
  }
  const uri = ed.document.uri.toString();
  if (deps.agent.running.includes(uri)) {
    void vscode.window.showInformationMessage('NKI Agent: already fixing this kernel (cancel it from its progress notification).');
    return;
  }
  deps.agent.begin(uri, fileName(uri)); // the progress shows at once; the server's nki/agentProgress fills it in
  const res = await runOnServer(deps, SERVER_COMMANDS.fixKernel, [{ uri, progress: 'client' }]) as { started?: boolean } | undefined;
  if (!res?.started) {
    deps.agent.end(uri); // the server said why (no task, already running, a bad backend)
  }
}

export async function showKernelReport(deps: CommandDeps): Promise<void> {
  const ed = pythonEditor();
  if (ed !== undefined) {
    if (deps.session.connection === undefined) {
      await serverDown(deps);
      return;
    }
    await deps.reports.show(ed.document.uri.toString());
  }
}

export function decideFix(deps: CommandDeps, decision: Decision): void {
  if (!deps.preview.decide(decision)) {
    void vscode.window.showInformationMessage('NKI Agent: no agent fix is waiting for Accept / Reject.');
  }
}

export async function verifyNow(deps: CommandDeps): Promise<void> {
  const ed = pythonEditor();
  if (ed !== undefined) {
    await runOnServer(deps, SERVER_COMMANDS.verify, [ed.document.uri.toString()]);
  }
}

export async function explainDiagnostic(deps: CommandDeps, code?: string): Promise<void> {
  if (code === undefined) {
    const ed = pythonEditor();
    if (ed === undefined) {
      return;
    }
    const diags = diagnosticsFor(vscode.languages.getDiagnostics(ed.document.uri), ed.selection.active);
    if (diags.length === 0) {
      void vscode.window.showInformationMessage('NKI Agent: no NKI diagnostic in this file to explain.');
      return;
    }
    if (diags.length === 1) {
      code = diagnosticCode(diags[0]);
    } else {
      const pick = await vscode.window.showQuickPick(diags.map((d) => ({
        label: diagnosticCode(d) ?? '', description: `line ${d.range.start.line + 1}`, detail: d.message,
      })), { title: 'NKI Agent: explain which diagnostic?' });
      code = pick?.label;
    }
  }
  if (code) {
    await runOnServer(deps, SERVER_COMMANDS.explainError, [code]);
  }
}

export async function selectTarget(): Promise<void> {
  const cfg = vscode.workspace.getConfiguration(SECTION);
  const now = cfg.get<string>('target') ?? 'auto';
  const words: Record<string, string> = {
    auto: "the task's TARGET, else the API generation's default", trn1: 'Trainium1', trn2: 'Trainium2', trn3: 'Trainium3',
  };
  const pick = await vscode.window.showQuickPick(TARGETS.map((t) => ({
    label: t, description: words[t] + (t === now ? ' (current)' : ''),
  })), { title: 'NKI Agent: target to check and simulate for' });
  if (pick !== undefined && pick.label !== now) {
    const ws = currentWorkspace();
    const where = writeTarget('target', cfg.inspect('target'), ws, 'workspace');
    await cfg.update('target', pick.label, where);
    void vscode.window.showInformationMessage(
      `NKI Agent: target ${pick.label} (nkiAgent.target) written to ${describeTarget(where, ws)}.`);
  }
}

export function validRunnerUrl(v: string): string | undefined {
  return /^https?:\/\/[^\s/]+/.test(v.trim()) ? undefined : 'an http(s) URL, e.g. http://trn-host:8765';
}

export async function selectRunner(deps: CommandDeps): Promise<void> {
  const cfg = vscode.workspace.getConfiguration(SECTION);
  const now = userSetting<string>('runnerUrl') ?? '';
  type Item = vscode.QuickPickItem & { value: string };
  const items: Item[] = [{ label: '$(vm) Local', description: 'the embedded simulator on this machine' + (now ? '' : ' (current)'), value: '' }];
  for (const url of deps.recentRunners()) {
    items.push({ label: `$(remote) ${url}`, description: url === now ? '(current)' : '', value: url });
  }
  items.push({ label: '$(add) Remote runner…', description: 'nki-agent runner serve on a Trainium host', value: 'new' });
  const pick = await vscode.window.showQuickPick(items, { title: 'NKI Agent: runner for verification' });
  if (pick === undefined) {
    return;
  }
  let url = pick.value;
  if (url === 'new') {
    const typed = await vscode.window.showInputBox({ title: 'NKI Agent: runner URL', prompt: 'URL of the remote runner',
      placeHolder: 'http://trn-host:8765', validateInput: validRunnerUrl, ignoreFocusOut: true });
    if (!typed) {
      return;
    }
    url = typed.trim().replace(/\/+$/, '');
  }
  await cfg.update('runnerUrl', url, vscode.ConfigurationTarget.Global); // machine-scoped: user settings
  const written = ['nkiAgent.runnerUrl to your user settings (machine-scoped)'];
  const mode = cfg.get<string>('verifyOnSave') ?? 'off';
  const next = verifyOnSaveWith(url, mode);
  if (next !== mode) { // after runnerUrl: a save in between never asks for "remote" without a runner
    const ws = currentWorkspace();
    const where = writeTarget('verifyOnSave', cfg.inspect('verifyOnSave'), ws, 'user');
    await cfg.update('verifyOnSave', next, where);
    written.push(`nkiAgent.verifyOnSave "${next}" to ${describeTarget(where, ws)}`);
  }
  const saves = url ? `saved kernels with a task now verify on the runner ${url}`
    : next !== 'off' ? 'saved kernels with a task now verify with the embedded simulator on this machine'
      : 'the runner is the embedded simulator on this machine';
  const message = `NKI Agent: ${saves} (wrote ${written.join('; ')}).`;
  if (url) {
    await deps.rememberRunner(url);
    if (!(await deps.secrets.has(RUNNER_TOKEN)) && !userSetting<string>('runnerTokenFile') && !process.env[RUNNER_TOKEN.env]) {
      const choice = await vscode.window.showInformationMessage(`${message} It needs its bearer token.`, 'Set runner token');
      if (choice === 'Set runner token') {
        await deps.secrets.prompt(RUNNER_TOKEN);
      }
      return;
    }
  }
  void vscode.window.showInformationMessage(message);
}

export function statusMenu(): Thenable<void> {
  const items = [
    { label: 'Show kernel report', command: COMMANDS.showKernelReport },
    { label: 'Select target', command: COMMANDS.selectTarget },
    { label: 'Select runner', command: COMMANDS.selectRunner },
    { label: 'Select interpreter', command: COMMANDS.selectInterpreter },
    { label: 'Restart server', command: COMMANDS.restartServer },
    { label: 'Show log', command: COMMANDS.showLog },
  ];
  return vscode.window.showQuickPick(items, { title: 'NKI Agent' }).then(async (pick) => {
    if (pick) {
      await vscode.commands.executeCommand(pick.command);
    }
  });
}

export function registerCommands(deps: CommandDeps): vscode.Disposable[] {
  const reg = vscode.commands.registerCommand;
  return [
    reg(COMMANDS.fixKernel, () => fixKernel(deps)),
    reg(COMMANDS.verifyNow, () => verifyNow(deps)),
    reg(COMMANDS.explainDiagnostic, (code?: unknown) => explainDiagnostic(deps, typeof code === 'string' ? code : undefined)),
    reg(COMMANDS.selectTarget, () => selectTarget()),
    reg(COMMANDS.selectRunner, () => selectRunner(deps)),
    reg(COMMANDS.restartServer, () => deps.session.restartNow()),
    reg(COMMANDS.setRunnerToken, () => deps.secrets.prompt(RUNNER_TOKEN)),
    reg(COMMANDS.setAnthropicApiKey, () => deps.secrets.prompt(ANTHROPIC_KEY)),
    reg(COMMANDS.selectInterpreter, () => deps.selectInterpreter()),
    reg(COMMANDS.installServer, () => deps.install()),
    reg(COMMANDS.showLog, () => deps.showLog()),
    reg(COMMANDS.statusMenu, () => statusMenu()),
    reg(COMMANDS.showKernelReport, () => showKernelReport(deps)),
    reg(COMMANDS.acceptFix, () => decideFix(deps, 'accept')),
    reg(COMMANDS.rejectFix, () => decideFix(deps, 'reject')),
  ];
}
