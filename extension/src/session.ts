// The server's life: find and check the interpreter, start the language server with the secrets in
// its environment, give a running server a changed secret that it takes live (the runner token), restart
// it (debounced) when the interpreter, another secret or the user asks, and apply the crash-loop policy
// when it dies. It never talks to vscode-languageclient directly: a
// `ConnectionFactory` (client.ts in the extension, a fake in tests) makes the connection.
import * as vscode from 'vscode';
import { CrashPolicy } from './crashPolicy';
import { Debouncer, RESTART_DELAY_MS, Timers, realTimers } from './debounce';
import { SERVER_MODULE } from './ids';
import { Interpreter, describeSource } from './interpreter';
import { Log, serverLogLevel } from './log';
import { ProbeResult } from './probe';
import { SecretKind, describeSecretEnv, serverEnv } from './secrets';
import { SetupProblem, setupProblem } from './setup';
import { ServerState } from './statusBar';

/** How to start the server process. */
export interface LaunchSpec {
  command: string;
  args: string[];
  env: NodeJS.ProcessEnv;
  cwd?: string;
}

/** One running language client (one server process life). */
export interface ServerConnection {
  start(): Promise<void>;
  stop(): Promise<void>;
  executeCommand(command: string, args: unknown[]): Promise<unknown>;
  /** A custom request of the server (e.g. nki/kernelReport). */
  sendRequest(method: string, params: unknown): Promise<unknown>;
  /** A notification to the server (e.g. nki/runnerToken). */
  sendNotification(method: string, params: unknown): Promise<void>;
  setLogLevel(level: vscode.LogLevel): void;
  /** Asks the editor for the inlay hints again (a toggle changed); optional in fakes. */
  refreshInlayHints?(): void;
}

export interface ConnectionHooks {
  /** The server process ended without being asked to (crash, exit at start). */
  onClosed(why: string): void;
  /** An error-level line of the server's stderr (the last one is quoted in the crash-loop message). */
  onErrorLine(text: string): void;
}

export type ConnectionFactory = (spec: LaunchSpec, hooks: ConnectionHooks) => ServerConnection;

export type CrashChoice = 'restart' | 'showLog' | undefined;

/** The user-facing side, injected (real dialogs in the extension, recorders in tests). */
export interface SessionUi {
  /** Shows the interpreter problem with its buttons (does not block the session). */
  setupProblem(problem: SetupProblem, interp: Interpreter | undefined): void;
  /** The ONE crash-loop message (with the server's last error line, if any); resolves with the button pressed. */
  crashLoop(crashes: number, lastError: string | undefined): Thenable<CrashChoice>;
  showLog(): void;
}

export interface SessionDeps {
  log: Log;
  ui: SessionUi;
  connect: ConnectionFactory;
  discover(): Promise<Interpreter | undefined>;
  probe(python: string): Promise<ProbeResult>;
  secrets(): Promise<Map<SecretKind, string>>;
  baseEnv: NodeJS.ProcessEnv;
  /** Working directory of the server (a folder of the extension's own, so workspace files cannot shadow modules). */
  cwd?: string;
  logLevel(): vscode.LogLevel;
  onState(state: ServerState): void;
  policy?: CrashPolicy;
  timers?: Timers;
  restartDelayMs?: number;
}

export class Session {
  private current: ServerConnection | undefined;
  private readonly ended = new WeakSet<ServerConnection>();
  private queue: Promise<void> = Promise.resolve();
  private readonly restarts: Debouncer;
  private readonly policy: CrashPolicy;
  private disposed = false;
  private interp: Interpreter | undefined;
  private probeResult: ProbeResult | undefined;
  private stateValue: ServerState = 'stopped';
  private launchedLogLevel: string | undefined;
  private lastError: string | undefined;

  constructor(private readonly deps: SessionDeps) {
    this.policy = deps.policy ?? new CrashPolicy();
    this.restarts = new Debouncer(deps.restartDelayMs ?? RESTART_DELAY_MS, (reasons) => {
      void this.enqueue(reasons);
    }, deps.timers ?? realTimers);
  }

  get state(): ServerState {
    return this.stateValue;
  }

  get interpreter(): Interpreter | undefined {
    return this.interp;
  }

  get lastProbe(): ProbeResult | undefined {
    return this.probeResult;
  }

  /** The running connection, or undefined when the server is not up. */
  get connection(): ServerConnection | undefined {
    return this.stateValue === 'running' ? this.current : undefined;
  }

  /** First start (activation). */
  start(): Promise<void> {
    return this.enqueue(['activation']);
  }

  /** A restart for a configuration-like reason: debounced, so a burst of triggers is one restart. */
  requestRestart(reason: string): void {
    if (!this.disposed) {
      this.restarts.trigger(reason);
    }
  }

  /** A stored secret changed. A running server gets a secret it takes live (`kind.notification`) at once, with
   *  the value its environment would have after a restart (the stored one, else the editor's); any other
   *  change, or one while the server is not running, restarts it as before (debounced). */
  async secretChanged(kind: SecretKind): Promise<void> {
    const conn = this.connection;
    if (kind.notification === undefined || conn === undefined) {
      this.requestRestart(`${kind.label} changed`);
      return;
    }
    const stored = await this.deps.secrets();
    const value = serverEnv(this.deps.baseEnv, stored)[kind.env] ?? '';
    this.deps.log.mask(value);
    try {
      await conn.sendNotification(kind.notification, { value });
      this.deps.log.info(`${kind.label} ${value ? 'given to' : 'removed from'} the running server (${kind.env}; no restart)`);
    } catch (e) {
      this.deps.log.warn(`sending the ${kind.label} to the server failed (${String(e)}): restarting it`);
      this.requestRestart(`${kind.label} changed`);
    }
  }

  /** The user's explicit restart: the crash count starts afresh, no delay. */
  restartNow(reason = 'restart command'): Promise<void> {
    this.restarts.cancel();
    this.policy.reset();
    return this.enqueue([reason]);
  }

  /** Runs the restarts in order, one at a time; resolves when this one has finished. */
  private enqueue(reasons: string[]): Promise<void> {
    const next = this.queue.then(() => this.restart(reasons)).catch((e: unknown) => {
      this.deps.log.error(`restart failed: ${String(e)}`);
    });
    this.queue = next;
    return next;
  }

  /** The channel's level changed: the trace follows at once; the server's own log level is given at
   *  start, so a change of it restarts the server (debounced). */
  setLogLevel(level: vscode.LogLevel): void {
    this.current?.setLogLevel(level);
    if (this.current !== undefined && this.launchedLogLevel !== undefined && serverLogLevel(level) !== this.launchedLogLevel) {
      this.requestRestart('log level changed');
    }
  }

  private setState(s: ServerState): void {
    this.stateValue = s;
    this.deps.onState(s);
  }

  private async stopCurrent(): Promise<void> {
    const conn = this.current;
    this.current = undefined;
    if (conn !== undefined) {
      this.ended.add(conn); // a close caused by our stop is not a crash
      try {
        await conn.stop();
      } catch (e) {
        this.deps.log.debug(`stopping the previous server: ${String(e)}`);
      }
    }
  }

  private async restart(reasons: string[]): Promise<void> {
    await this.stopCurrent();
    if (this.disposed) {
      return;
    }
    const { log } = this.deps;
    log.info(`starting the server (${reasons.join(', ')})`);
    this.setState('starting');
    const interp = await this.deps.discover();
    this.interp = interp;
    this.probeResult = undefined;
    if (interp !== undefined) {
      log.info(`interpreter: ${interp.path} (from ${describeSource(interp.source)})`);
      this.probeResult = await this.deps.probe(interp.path);
    }
    const problem = setupProblem(interp, this.probeResult);
    if (problem !== undefined) {
      log.warn(problem.message);
      this.setState('needs-setup');
      this.deps.ui.setupProblem(problem, interp);
      return;
    }
    const ok = this.probeResult as Extract<ProbeResult, { kind: 'ok' }>;
    const stored = await this.deps.secrets();
    for (const v of stored.values()) {
      log.mask(v);
    }
    const spec: LaunchSpec = {
      command: interp!.path,
      args: ['-m', SERVER_MODULE, '--log-level', serverLogLevel(this.deps.logLevel())],
      env: serverEnv(this.deps.baseEnv, stored),
      cwd: this.deps.cwd,
    };
    log.info(`launch: ${spec.command} ${spec.args.join(' ')} (Python ${ok.version}, nki_agent ${ok.packageVersion}; ` +
      `${describeSecretEnv(stored)})`);
    this.launchedLogLevel = spec.args[spec.args.length - 1];
    const conn: ServerConnection = this.deps.connect(spec, {
      onClosed: (why) => this.onEnded(conn, why),
      onErrorLine: (text) => {
        this.lastError = text.slice(0, 300);
      },
    });
    this.current = conn;
    try {
      await conn.start();
    } catch (e) {
      this.onEnded(conn, `it failed to start: ${e instanceof Error ? e.message : String(e)}`);
      return;
    }
    if (this.current === conn && !this.ended.has(conn)) {
      conn.setLogLevel(this.deps.logLevel());
      this.setState('running');
    }
  }

  /** A connection ended on its own: count it once, then restart (debounced) or give up with ONE message. */
  private onEnded(conn: ServerConnection, why: string): void {
    if (this.ended.has(conn) || this.disposed) {
      return;
    }
    this.ended.add(conn);
    if (this.current === conn) {
      this.current = undefined;
    }
    const decision = this.policy.record();
    this.deps.log.error(`the server stopped: ${why} (${this.policy.recent} in the last ${this.policy.windowMs / 60000} min)`);
    if (decision === 'restart') {
      this.setState('starting');
      this.restarts.trigger('crash');
      return;
    }
    if (decision === 'give-up') {
      this.setState('crashed');
      void conn.stop().catch(() => undefined);
      void Promise.resolve(this.deps.ui.crashLoop(this.policy.recent, this.lastError)).then((choice) => {
        if (choice === 'restart') {
          void this.restartNow('Restart after crashes');
        } else if (choice === 'showLog') {
          this.deps.ui.showLog();
        }
      });
    }
  }

  async dispose(): Promise<void> {
    this.disposed = true;
    this.restarts.cancel();
    await this.queue;
    await this.stopCurrent();
    this.setState('stopped');
  }
}
