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

/** The server's `--log-level` (Python logging names) for a channel level: one step quieter than the
 *  channel, since the server's INFO is chatty (Trace: DEBUG, Debug: INFO, Info/Warning: WARNING). */
export function serverLogLevel(level: vscode.LogLevel): string {
  switch (level) {
    case vscode.LogLevel.Trace:
      return 'DEBUG';
    case vscode.LogLevel.Debug:
      return 'INFO';
    case vscode.LogLevel.Info:
      return 'WARNING';
    case vscode.LogLevel.Error:
      return 'ERROR';
    case vscode.LogLevel.Off:
      return 'CRITICAL';
    default:
      return 'WARNING';
  }
}

export type LineLevel = 'debug' | 'info' | 'warn' | 'error';

const PY_LEVEL = /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) (.*)$/;
const LINE_LEVEL: Record<string, LineLevel> = { DEBUG: 'debug', INFO: 'info', WARNING: 'warn', ERROR: 'error', CRITICAL: 'error' };

/** One line of the server's stderr (`asctime LEVEL logger: message`, see server/__main__.py) at its own
 *  level, without the timestamp (the channel adds one); anything else (a traceback) is an error. */
export function serverLine(line: string): { level: LineLevel; text: string } {
  const m = PY_LEVEL.exec(line);
  return m ? { level: LINE_LEVEL[m[1]], text: m[2] } : { level: 'error', text: line };
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
