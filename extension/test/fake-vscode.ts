// A small fake of the `vscode` module for the unit tests: the enums and classes the extension uses,
// dialogs that answer from a queue and record what they showed, an in-memory configuration that
// records every write, output channels that keep their lines. `reset()` before each test.
/* eslint-disable @typescript-eslint/no-explicit-any */

export enum LogLevel { Off = 0, Trace = 1, Debug = 2, Info = 3, Warning = 4, Error = 5 }
export enum ConfigurationTarget { Global = 1, Workspace = 2, WorkspaceFolder = 3 }
export enum ProgressLocation { SourceControl = 1, Window = 10, Notification = 15 }
export enum StatusBarAlignment { Left = 1, Right = 2 }
export enum ViewColumn { Active = -1, Beside = -2, One = 1 }

export class ThemeColor { constructor(readonly id: string) {} }

export class Disposable {
  constructor(private readonly fn: () => void = () => undefined) {}
  dispose(): void { this.fn(); }
}

export class EventEmitter<T> {
  private listeners: ((e: T) => void)[] = [];
  event = (l: (e: T) => void) => { this.listeners.push(l); return new Disposable(() => { this.listeners = this.listeners.filter((x) => x !== l); }); };
  fire(e: T): void { for (const l of [...this.listeners]) l(e); }
  dispose(): void { this.listeners = []; }
}

export class Position {
  constructor(readonly line: number, readonly character: number) {}
  isBefore(o: Position): boolean { return this.line < o.line || (this.line === o.line && this.character < o.character); }
  isAfter(o: Position): boolean { return o.isBefore(this); }
}

export class Range {
  constructor(readonly start: Position, readonly end: Position) {}
  contains(p: Position): boolean { return !p.isBefore(this.start) && !p.isAfter(this.end); }
}

export class Uri {
  private constructor(readonly scheme: string, readonly fsPath: string) {}
  static file(p: string): Uri { return new Uri('file', p); }
  toString(): string { return `${this.scheme}://${this.fsPath}`; }
}

export interface Shown { kind: 'error' | 'warning' | 'info' | 'quickPick' | 'inputBox'; message: string; items: string[]; options?: any }

/** Everything the fake records, and the answers it gives. */
export const fake = {
  shown: [] as Shown[],
  /** Answers for dialogs, in order (a button label, a quick pick label, an input box value, or undefined). */
  answers: [] as (string | undefined)[],
  /** User (global) settings. */
  config: new Map<string, unknown>(),
  /** Workspace-level settings (a repository's .vscode/settings.json): `get` answers them first, as a VS Code
   *  that ignored "scope": "machine" would; `inspect` reports them as workspaceValue. */
  workspaceConfig: new Map<string, unknown>(),
  configWrites: [] as { key: string; value: unknown; target: unknown }[],
  channels: [] as FakeLogChannel[],
  executed: [] as { command: string; args: unknown[] }[],
  extensions: new Map<string, unknown>(),
  diagnostics: [] as any[],
  activeTextEditor: undefined as any,
  workspaceFolders: undefined as { uri: Uri }[] | undefined,
  /** The open `.code-workspace` file (a multi-root workspace), if any. */
  workspaceFile: undefined as Uri | undefined,
  progress: [] as string[],
  /** Cancel buttons of the progress notifications shown (press one: `fake.cancels[i]()`). */
  cancels: [] as (() => void)[],
  /** Progress tasks still running (their promise has not settled). */
  progressOpen: 0,
  panels: [] as any[],
  /** Keys VS Code refuses to write ("not a registered configuration"). */
  unregistered: new Set<string>(),
  reset(): void {
    this.unregistered = new Set();
    this.shown = []; this.answers = []; this.config = new Map(); this.workspaceConfig = new Map(); this.configWrites = []; this.channels = [];
    this.executed = []; this.extensions = new Map(); this.diagnostics = []; this.activeTextEditor = undefined;
    this.workspaceFolders = undefined; this.workspaceFile = undefined; this.progress = []; this.cancels = []; this.progressOpen = 0; this.panels = [];
  },
};

export class FakeLogChannel {
  lines: string[] = [];
  logLevel = LogLevel.Info;
  private readonly levelEmitter = new EventEmitter<LogLevel>();
  onDidChangeLogLevel = this.levelEmitter.event;
  constructor(readonly name: string) {}
  private add(level: string, msg: string, args: unknown[]): void {
    this.lines.push(`[${level}] ${msg}${args.length ? ' ' + args.map((a) => String(a)).join(' ') : ''}`);
  }
  trace(m: string, ...a: unknown[]): void { this.add('trace', m, a); }
  debug(m: string, ...a: unknown[]): void { this.add('debug', m, a); }
  info(m: string, ...a: unknown[]): void { this.add('info', m, a); }
  warn(m: string, ...a: unknown[]): void { this.add('warn', m, a); }
  error(m: string | Error, ...a: unknown[]): void { this.add('error', String(m), a); }
  append(v: string): void { this.lines.push(v); }
  appendLine(v: string): void { this.lines.push(v); }
  replace(v: string): void { this.lines = [v]; }
  clear(): void { this.lines = []; }
  show(): void { fake.shown.push({ kind: 'info', message: `show channel ${this.name}`, items: [] }); }
  hide(): void { /* nothing */ }
  dispose(): void { /* nothing */ }
  setLevel(l: LogLevel): void { this.logLevel = l; this.levelEmitter.fire(l); }
}

function answer(kind: Shown['kind'], message: string, items: string[], options?: any): Promise<string | undefined> {
  fake.shown.push({ kind, message, items, options });
  return Promise.resolve(fake.answers.length ? fake.answers.shift() : undefined);
}

function messageArgs(rest: any[]): string[] {
  return rest.filter((x) => typeof x === 'string' || (x && typeof x.title === 'string')).map((x) => (typeof x === 'string' ? x : x.title));
}

export const window = {
  get activeTextEditor() { return fake.activeTextEditor; },
  createOutputChannel(name: string): FakeLogChannel { const c = new FakeLogChannel(name); fake.channels.push(c); return c; },
  showErrorMessage: (m: string, ...rest: any[]) => answer('error', m, messageArgs(rest)),
  showWarningMessage: (m: string, ...rest: any[]) => answer('warning', m, messageArgs(rest)),
  showInformationMessage: (m: string, ...rest: any[]) => answer('info', m, messageArgs(rest)),
  async showQuickPick(items: any[], options?: any): Promise<any> {
    const labels = items.map((i) => (typeof i === 'string' ? i : i.label));
    const a = await answer('quickPick', options?.title ?? '', labels, options);
    return items.find((i) => (typeof i === 'string' ? i : i.label) === a);
  },
  showInputBox: (options?: any) => answer('inputBox', options?.title ?? '', [], options),
  async withProgress<R>(options: any, task: (p: { report(v: { message?: string }): void }, t: any) => Promise<R>): Promise<R> {
    fake.progress.push(`begin ${options.title}${options.cancellable ? ' (cancellable)' : ''}`);
    const cancel = new EventEmitter<void>();
    const token = { isCancellationRequested: false, onCancellationRequested: cancel.event };
    fake.cancels.push(() => { token.isCancellationRequested = true; cancel.fire(); });
    fake.progressOpen += 1;
    try {
      return await task({ report: (v) => { fake.progress.push(v.message ?? ''); } }, token);
    } finally {
      fake.progressOpen -= 1;
      fake.progress.push(`end ${options.title}`);
    }
  },
  createStatusBarItem(id: string) {
    return { id, text: '', tooltip: '', command: undefined, name: '', backgroundColor: undefined, show() {}, hide() {}, dispose() {} };
  },
  showOpenDialog: () => Promise.resolve(undefined),
  createWebviewPanel(viewType: string, title: string, column: unknown, options: any) {
    const disposed = new EventEmitter<void>();
    const viewState = new EventEmitter<{ webviewPanel: any }>();
    const panel = {
      viewType, title, column, options, visible: true, revealed: 0, webview: { html: '', options },
      onDidDispose: disposed.event, onDidChangeViewState: viewState.event,
      reveal() { panel.revealed += 1; },
      dispose() { disposed.fire(); },
      /** Test helper: the panel comes back into view. */
      show() { viewState.fire({ webviewPanel: panel }); },
    };
    fake.panels.push(panel);
    return panel;
  },
};

export const workspace = {
  get workspaceFolders() { return fake.workspaceFolders; },
  get workspaceFile() { return fake.workspaceFile; },
  getConfiguration(section?: string) {
    const prefix = section ? `${section}.` : '';
    return {
      get<T>(key: string, dflt?: T): T | undefined {
        const v = fake.workspaceConfig.get(prefix + key) ?? fake.config.get(prefix + key);
        return (v === undefined ? dflt : v) as T | undefined;
      },
      inspect(key: string) {
        return { key: prefix + key, defaultValue: undefined, globalValue: fake.config.get(prefix + key),
          workspaceValue: fake.workspaceConfig.get(prefix + key), workspaceFolderValue: undefined };
      },
      has: (key: string) => fake.config.has(prefix + key),
      async update(key: string, value: unknown, target?: unknown) {
        if (fake.unregistered.has(prefix + key)) {
          throw new Error(`Unable to write to Workspace Settings because ${prefix + key} is not a registered configuration.`);
        }
        fake.configWrites.push({ key: prefix + key, value, target });
        if (value === undefined) fake.config.delete(prefix + key); else fake.config.set(prefix + key, value);
      },
    };
  },
  onDidChangeConfiguration: () => new Disposable(),
};

export const extensions = {
  getExtension: (id: string) => fake.extensions.get(id),
};

export const commands = {
  registerCommand: (_id: string, _fn: (...a: unknown[]) => unknown) => new Disposable(),
  async executeCommand(command: string, ...args: unknown[]) { fake.executed.push({ command, args }); return undefined; },
};

export const languages = {
  getDiagnostics: () => fake.diagnostics,
};

/** A SecretStorage in memory (what the extension gets as context.secrets). */
export class FakeSecretStorage {
  readonly data = new Map<string, string>();
  private readonly emitter = new EventEmitter<{ key: string }>();
  onDidChange = this.emitter.event;
  async get(key: string): Promise<string | undefined> { return this.data.get(key); }
  async store(key: string, value: string): Promise<void> { this.data.set(key, value); this.emitter.fire({ key }); }
  async delete(key: string): Promise<void> { this.data.delete(key); this.emitter.fire({ key }); }
  async keys(): Promise<string[]> { return [...this.data.keys()]; }
}

// vscode-languageclient subclasses many vscode classes when it loads (CompletionItem, CodeLens, ...):
// any other exported name is a plain class, so the bundle can be loaded (never `then`: not a thenable).
declare const module: { exports: Record<string | symbol, unknown> };
module.exports = new Proxy(module.exports, {
  get(target, key) {
    if (key in target || typeof key === 'symbol' || key === 'then' || key === 'default') {
      return target[key];
    }
    const cls = class {};
    target[key] = cls;
    return cls;
  },
});
