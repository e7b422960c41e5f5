// The status bar item: the target (auto/trn1/trn2/trn3), the runner state (local / remote host /
// unreachable), the fix agent's spend since the editor started (after its first run), the server's
// state when it is not running, and a spinner while the server reports work-done progress (Verify now, a
// remote run, the agent...: the titles lead the tooltip); clicking it opens the NKI Agent menu.
import * as vscode from 'vscode';
import { Spend } from './agentRuns';
import { COMMANDS } from './ids';
import { RunnerState, shortUrl } from './runner';
import { ActiveProgress } from './serverProgress';

export type ServerState = 'starting' | 'running' | 'needs-setup' | 'crashed' | 'stopped';

export interface StatusView {
  text: string;
  tooltip: string;
  warning: boolean;
}

/** Pure rendering of the status item. */
/** "$0.0123" below a dollar (model calls cost cents), "$1.23" above. */
export function dollars(v: number): string {
  return v < 1 ? `$${v.toFixed(4)}` : `$${v.toFixed(2)}`;
}

const NO_SPEND: Spend = { dollars: 0, tokens: 0, runs: 0 };

/** The progress lines of the tooltip: "NKI: verifying — /ws/k.py". */
export function progressTip(progress: readonly ActiveProgress[]): string {
  return progress.map((p) => (p.message ? `${p.title} — ${p.message}` : p.title)).join('\n');
}

export function statusView(target: string, runner: RunnerState, server: ServerState, spend: Spend = NO_SPEND,
  progress: readonly ActiveProgress[] = []): StatusView {
  let runnerText: string;
  let runnerTip: string;
  let warning = false;
  switch (runner.kind) {
    case 'local':
      runnerText = 'local';
      runnerTip = 'Runner: local (embedded simulator)';
      break;
    case 'remote':
      runnerText = shortUrl(runner.url);
      runnerTip = `Runner: ${runner.url}${runner.backend ? ` (${runner.backend} backend)` : ''}`;
      break;
    case 'checking':
      runnerText = shortUrl(runner.url);
      runnerTip = `Runner: ${runner.url} (checking…)`;
      break;
    case 'unreachable':
      runnerText = `${shortUrl(runner.url)} unreachable`;
      runnerTip = `Runner: ${runner.url} is unreachable (${runner.reason})`;
      warning = true;
      break;
  }
  const serverTip: Record<ServerState, string> = {
    starting: 'Server: starting…',
    running: 'Server: running',
    'needs-setup': 'Server: not started — the interpreter needs attention (see the message or the log)',
    crashed: 'Server: stopped after repeated crashes (Restart server)',
    stopped: 'Server: stopped',
  };
  const busy = server === 'running' && progress.length > 0;
  const icon = busy || server === 'starting' ? '$(sync~spin)' : server === 'running' ? '$(circuit-board)' : '$(warning)';
  warning = warning || server === 'needs-setup' || server === 'crashed';
  const spendText = spend.runs ? ` · ${dollars(spend.dollars)}` : '';
  const spendTip = `Agent spend since the editor started: ${dollars(spend.dollars)}, ${spend.tokens.toLocaleString('en-US')} tokens, ` +
    `${spend.runs} run(s)`;
  return {
    text: `${icon} NKI ${target} · ${runnerText}${spendText}`,
    tooltip: `${busy ? `${progressTip(progress)}\n` : ''}NKI Agent — target: ${target}\n${runnerTip}\n${spendTip}\n${serverTip[server]}\n` +
      'Click for NKI Agent actions',
    warning,
  };
}

export class StatusBar implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;

  constructor() {
    this.item = vscode.window.createStatusBarItem('nkiAgent.status', vscode.StatusBarAlignment.Left, 50);
    this.item.name = 'NKI Agent';
    this.item.command = COMMANDS.statusMenu;
  }

  show(view: StatusView): void {
    this.item.text = view.text;
    this.item.tooltip = view.tooltip;
    this.item.backgroundColor = view.warning ? new vscode.ThemeColor('statusBarItem.warningBackground') : undefined;
    this.item.show();
  }

  dispose(): void {
    this.item.dispose();
  }
}
