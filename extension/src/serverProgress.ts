// The server's work-done progress ($/progress begin / report / end of the tokens it creates with
// window/workDoneProgress/create: Verify now, remote runs, the agent...), kept per token so the status
// bar can spin while any of it runs, with the titles in its tooltip. The language client still shows
// each progress itself; `tap` only listens (client.ts wraps the client's `onProgress` with it).
// Everything is cleared when the server stops, crashes or restarts: no `end` will come from it.
import * as vscode from 'vscode';

export interface ActiveProgress {
  title: string;
  message?: string;
}

/** The three shapes of a WorkDoneProgress value (vscode-languageserver-protocol's, loosely typed). */
interface ProgressValue {
  kind?: unknown;
  title?: unknown;
  message?: unknown;
}

export class ServerProgress implements vscode.Disposable {
  private readonly running = new Map<string, ActiveProgress>();
  private readonly changed = new vscode.EventEmitter<void>();
  readonly onDidChange = this.changed.event;

  /** What runs now, oldest first. */
  get active(): ActiveProgress[] {
    return [...this.running.values()];
  }

  /** One $/progress value of `token`. */
  update(token: string | number, value: unknown): void {
    const v = (value ?? {}) as ProgressValue;
    const key = String(token);
    if (v.kind === 'begin') {
      this.running.set(key, { title: typeof v.title === 'string' && v.title ? v.title : 'NKI Agent: working',
        message: typeof v.message === 'string' ? v.message : undefined });
    } else if (v.kind === 'report') {
      const cur = this.running.get(key);
      if (cur === undefined) {
        return;
      }
      if (typeof v.message === 'string') {
        this.running.set(key, { ...cur, message: v.message });
      }
    } else if (v.kind === 'end') {
      if (!this.running.delete(key)) {
        return;
      }
    } else {
      return; // a partial result or anything else: not work-done progress
    }
    this.changed.fire();
  }

  /** A handler for `onProgress(type, token, handler)` that tells this tracker, then the original handler. */
  tap<P>(token: string | number, handler: (value: P) => void): (value: P) => void {
    return (value: P) => {
      try {
        this.update(token, value);
      } finally {
        handler(value);
      }
    };
  }

  /** The server stopped (restart, crash, deactivation): nothing it began is running any more. */
  clear(): void {
    if (this.running.size) {
      this.running.clear();
      this.changed.fire();
    }
  }

  dispose(): void {
    this.running.clear();
    this.changed.dispose();
  }
}
