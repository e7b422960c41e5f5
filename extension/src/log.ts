// Logging: the one `LogOutputChannel` ("NKI Agent") and how its level drives the language client's
// trace and the server's --log-level; plus redaction of secret values from anything we log ourselves.
import * as vscode from 'vscode';

export type TraceSetting = 'off' | 'messages' | 'verbose';

/** The LSP trace for a channel level: Trace → verbose, Debug → messages, anything quieter → off. */
export function traceFor(level: vscode.LogLevel): TraceSetting {
  if (level === vscode.LogLevel.Trace) {
    return 'verbose';
  }
  if (level === vscode.LogLevel.Debug) {
    return 'messages';
  }
  return 'off';
}

/** The server's `--log-level` (Python logging names) for a channel level. */
export function serverLogLevel(level: vscode.LogLevel): string {
  switch (level) {
    case vscode.LogLevel.Trace:
    case vscode.LogLevel.Debug:
      return 'DEBUG';
    case vscode.LogLevel.Info:
      return 'INFO';
    case vscode.LogLevel.Error:
      return 'ERROR';
    case vscode.LogLevel.Off:
      return 'CRITICAL';
    default:
      return 'WARNING';
  }
}

/** `text` with every secret value (of 4+ characters) replaced by `***`. */
export function redact(text: string, secrets: Iterable<string>): string {
  let out = text;
  for (const s of secrets) {
    if (s.length >= 4) {
      out = out.split(s).join('***');
    }
  }
  return out;
}

/** The extension's own log lines: written to the channel with known secret values masked. */
export class Log {
  private readonly secrets = new Set<string>();

  constructor(readonly channel: vscode.LogOutputChannel) {}

  /** Values that must never appear in the log (the SecretStorage entries, once read). */
  forget(value: string): void {
    this.secrets.delete(value);
  }

  mask(value: string): void {
    if (value) {
      this.secrets.add(value);
    }
  }

  info(msg: string): void {
    this.channel.info(redact(msg, this.secrets));
  }

  warn(msg: string): void {
    this.channel.warn(redact(msg, this.secrets));
  }

  error(msg: string): void {
    this.channel.error(redact(msg, this.secrets));
  }

  debug(msg: string): void {
    this.channel.debug(redact(msg, this.secrets));
  }
}
