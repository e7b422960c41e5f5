// Agent runs as the editor shows them: one cancellable progress notification per document while the
// agent works (the server's `nki/agentProgress` messages: turn, tool, $ and tokens so far; Cancel sends
// `nki.cancelAgent [uri]`, which stops the model call or the sandboxed verification), closed when the
// diff preview opens or `nki/agentResult` arrives; and the agent's spend since the editor started
// (the sum of each result's dollars and tokens), which the status bar shows.
import * as vscode from 'vscode';
import { fileName } from './fixPreview';

export interface AgentProgressParams { uri: string; message?: string; dollars?: number; tokens?: number }
export interface AgentResultParams {
  uri: string; verdict?: string; summary?: string; applied?: boolean; stale?: boolean; rejected?: boolean;
  dollars?: number; tokens?: number;
}

export interface Spend { dollars: number; tokens: number; runs: number }

interface Open { report(message: string): void; close(): void }

export class AgentRuns implements vscode.Disposable {
  private readonly open = new Map<string, Open>();
  private total: Spend = { dollars: 0, tokens: 0, runs: 0 };
  private readonly changed = new vscode.EventEmitter<Spend>();
  /** Fires when the spend grows (a run finished). */
  readonly onDidChangeSpend = this.changed.event;

  constructor(private readonly cancel: (uri: string) => Promise<unknown>) {}

  get spend(): Spend {
    return { ...this.total };
  }

  get running(): string[] {
    return [...this.open.keys()];
  }

  /** Show the progress notification of a run on `uri` (no-op when one is open). */
  begin(uri: string, name: string): void {
    if (this.open.has(uri)) {
      return;
    }
    let close: () => void = () => undefined;
    let report: (m: string) => void = () => undefined;
    const closed = new Promise<void>((resolve) => { close = resolve; });
    this.open.set(uri, { report: (m) => report(m), close: () => close() });
    void vscode.window.withProgress({
      location: vscode.ProgressLocation.Notification, cancellable: true, title: `NKI Agent: fixing ${name}`,
    }, async (progress, token) => {
      report = (m) => progress.report({ message: m });
      token.onCancellationRequested(() => {
        progress.report({ message: 'cancelling…' });
        void this.cancel(uri).catch(() => undefined);
      });
      await closed;
    });
  }

  /** A `nki/agentProgress` notification (a run the server started on its own — Rerun — opens its progress). */
  progress(p: AgentProgressParams): void {
    if (typeof p?.uri !== 'string') {
      return;
    }
    this.begin(p.uri, fileName(p.uri));
    if (p.message) {
      this.open.get(p.uri)?.report(p.message);
    }
  }

  /** The run on `uri` stops showing progress (its diff preview opened, or it ended). */
  end(uri: string): void {
    this.open.get(uri)?.close();
    this.open.delete(uri);
  }

  /** A `nki/agentResult`: the run ended; its cost joins the spend. */
  result(p: AgentResultParams): void {
    if (typeof p?.uri !== 'string') {
      return;
    }
    this.end(p.uri);
    const dollars = Number.isFinite(p.dollars) && (p.dollars as number) > 0 ? (p.dollars as number) : 0;
    const tokens = Number.isInteger(p.tokens) && (p.tokens as number) > 0 ? (p.tokens as number) : 0;
    this.total = { dollars: this.total.dollars + dollars, tokens: this.total.tokens + tokens, runs: this.total.runs + 1 };
    this.changed.fire(this.spend);
  }

  /** Close every progress (the server stopped: no result will come). */
  endAll(): void {
    for (const uri of [...this.open.keys()]) {
      this.end(uri);
    }
  }

  dispose(): void {
    this.endAll();
    this.changed.dispose();
  }
}
