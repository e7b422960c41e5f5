// The vscode-languageclient side: one `LanguageClient` per server life over stdio, with our error
// handler (every death goes to the session's crash policy; the client never restarts on its own and
// never pops up its own messages), the trace driven by the log channel's level, the `nkiAgent`
// settings as initializationOptions and live didChangeConfiguration (machine-scoped ones at user level
// only: machineSettings.ts), and the server's notifications.
import * as vscode from 'vscode';
import {
  CancellationToken, CloseAction, Disposable, ErrorAction, ExecuteCommandRequest, InlayHintRequest, LanguageClient, LanguageClientOptions,
  NotificationHandler as LspNotificationHandler, ProgressType, ServerOptions, Trace, TransportKind,
} from 'vscode-languageclient/node';
import { configuredKinds, filterHints } from './inlayKinds';
import { ServerProgress } from './serverProgress';
import { SECTION } from './ids';
import { Inspector, serverSettings } from './machineSettings';
import * as readline from 'readline';
import { serverLine, traceFor } from './log';
import { ApplyResult } from './fixPreview';
import { ConnectionFactory, ServerConnection } from './session';

/** A LanguageClient that logs its errors but leaves every notification to the session (no duplicate pop-ups).
 *  The agent's fix (the applyEdit labelled "NKI Agent: fix kernel") goes to the diff preview through the
 *  `workspace.handleApplyEdit` middleware (fixPreview.ts); every other edit is applied as usual. */
class QuietLanguageClient extends LanguageClient {
  /** Told every $/progress value of the server's work-done progress (the status bar's spinner). */
  progressTap: ServerProgress | undefined;

  override error(message: string, data?: unknown, _showNotification?: boolean | 'force'): void {
    super.error(message, data, false);
  }

  /** The client's own progress UI (ProgressPart) listens here per token; the tap listens too. */
  override onProgress<P>(type: ProgressType<P>, token: string | number, handler: LspNotificationHandler<P>): Disposable {
    const tap = this.progressTap;
    return super.onProgress(type, token, tap === undefined ? handler : tap.tap(token, handler));
  }
}

const TRACE: Record<string, Trace> = { off: Trace.Off, messages: Trace.Messages, verbose: Trace.Verbose };

/** `inspect` of the `nkiAgent` section's keys. */
export function sectionInspector(): Inspector {
  const cfg = vscode.workspace.getConfiguration(SECTION);
  return (key) => cfg.inspect(key);
}

/** The `nkiAgent` section as a plain object (what the server reads from initializationOptions); the
 *  machine-scoped settings (runnerUrl, runnerTokenFile, modelBackend, interpreter, trustLocal, compilerBackend) at user
 *  level only, never a workspace's value. */
export function settingsSnapshot(): Record<string, unknown> {
  const effective = JSON.parse(JSON.stringify(vscode.workspace.getConfiguration(SECTION))) as Record<string, unknown>;
  return serverSettings(effective, sectionInspector());
}

export type NotificationHandler = (method: string, params: unknown) => void;
/** The answer to a server applyEdit the extension handles itself (the agent's fix), else undefined. */
export type ApplyEditHandler = (params: unknown) => Promise<ApplyResult> | undefined;

export function connectionFactory(channel: vscode.LogOutputChannel, onNotification: NotificationHandler,
  notifications: readonly string[], onApplyEdit: ApplyEditHandler = () => undefined, progress?: ServerProgress): ConnectionFactory {
  return (spec, hooks) => {
    const serverOptions: ServerOptions = {
      command: spec.command,
      args: spec.args,
      transport: TransportKind.stdio,
      options: { env: spec.env, cwd: spec.cwd },
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [{ scheme: 'file', language: 'python' }],
      outputChannel: channel,
      traceOutputChannel: channel,
      revealOutputChannelOn: 4, // RevealOutputChannelOn.Never
      initializationOptions: settingsSnapshot(),
      synchronize: { configurationSection: SECTION },
      initializationFailedHandler: () => false,
      middleware: {
        workspace: {
          handleApplyEdit: async (params, next) => (await onApplyEdit(params)) ?? next(params, CancellationToken.None),
        },
        // the per-kind toggles (`nkiAgent.inlayHints.<kind>`, inlayKinds.ts), read at each request
        provideInlayHints: async (document, viewPort, token, next) => filterHints(await next(document, viewPort, token), configuredKinds()),
      },
      stdioOptions: {
        stdout: () => undefined, // stdio transport: stdout is the LSP stream
        stderr: (input, out) => {
          readline.createInterface({ input, crlfDelay: Infinity, terminal: false, historySize: 0 }).on('line', (line) => {
            const { level, text } = serverLine(line);
            out[level](`server: ${text}`);
            if (level === 'error' && text.trim()) {
              hooks.onErrorLine(text);
            }
          });
        },
      },
      errorHandler: {
        error: () => ({ action: ErrorAction.Continue, handled: true }),
        closed: () => {
          hooks.onClosed('the server process exited');
          return { action: CloseAction.DoNotRestart, handled: true };
        },
      },
    };
    const client = new QuietLanguageClient('nkiAgent', 'NKI Agent', serverOptions, clientOptions);
    client.progressTap = progress;
    for (const method of notifications) {
      client.onNotification(method, (params: unknown) => onNotification(method, params));
    }
    const conn: ServerConnection = {
      start: () => client.start(),
      stop: async () => {
        if (client.needsStop()) {
          await client.stop(2000);
        }
      },
      executeCommand: (command, args) => client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args }),
      sendRequest: (method, params) => client.sendRequest(method, params),
      sendNotification: (method, params) => client.sendNotification(method, params),
      setLogLevel: (level) => {
        void client.setTrace(TRACE[traceFor(level)]);
      },
      refreshInlayHints: () => {
        const feature = client.getFeature(InlayHintRequest.method);
        const fired = new Set<unknown>();
        for (const doc of vscode.workspace.textDocuments) {
          const p = feature?.getProvider(doc);
          if (p !== undefined && !fired.has(p.onDidChangeInlayHints)) {
            fired.add(p.onDidChangeInlayHints);
            p.onDidChangeInlayHints.fire();
          }
        }
      },
    };
    return conn;
  };
}
