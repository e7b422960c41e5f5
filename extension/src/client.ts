// The vscode-languageclient side: one `LanguageClient` per server life over stdio, with our error
// handler (every death goes to the session's crash policy; the client never restarts on its own and
// never pops up its own messages), the trace driven by the log channel's level, the `nkiAgent`
// settings as initializationOptions and live didChangeConfiguration, and the server's notifications.
import * as vscode from 'vscode';
import {
  CloseAction, ErrorAction, ExecuteCommandRequest, LanguageClient, LanguageClientOptions, ServerOptions, Trace,
  TransportKind,
} from 'vscode-languageclient/node';
import { SECTION } from './ids';
import * as readline from 'readline';
import { serverLine, traceFor } from './log';
import { ConnectionFactory, ServerConnection } from './session';

/** A LanguageClient that logs its errors but leaves every notification to the session (no duplicate pop-ups).
 *  Seam for the agent-fix diff preview: override `handleApplyWorkspaceEdit` here and, for the edit labelled
 *  "NKI Agent: fix kernel", show the diff and apply only on accept (answer `{applied: false}` on reject). */
class QuietLanguageClient extends LanguageClient {
  override error(message: string, data?: unknown, _showNotification?: boolean | 'force'): void {
    super.error(message, data, false);
  }
}

const TRACE: Record<string, Trace> = { off: Trace.Off, messages: Trace.Messages, verbose: Trace.Verbose };

/** The `nkiAgent` section as a plain object (what the server reads from initializationOptions). */
export function settingsSnapshot(): Record<string, unknown> {
  return JSON.parse(JSON.stringify(vscode.workspace.getConfiguration(SECTION))) as Record<string, unknown>;
}

export type NotificationHandler = (method: string, params: unknown) => void;

export function connectionFactory(channel: vscode.LogOutputChannel, onNotification: NotificationHandler,
  notifications: readonly string[]): ConnectionFactory {
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
      setLogLevel: (level) => {
        void client.setTrace(TRACE[traceFor(level)]);
      },
    };
    return conn;
  };
}
