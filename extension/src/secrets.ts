// Secrets: the runner token and the Anthropic API key, kept in VS Code's SecretStorage only. They reach
// the server as environment variables of its process at start (NKI_AGENT_RUNNER_TOKEN,
// ANTHROPIC_API_KEY) — never settings, never log lines (the log only names which variables were set).
// A secret with a `notification` reaches a running server in that notification when it changes (the
// server sets its variable; no restart); changing any other one restarts the server (session.ts).
import * as vscode from 'vscode';
import { CLIENT_NOTIFICATIONS } from './ids';

export interface SecretKind {
  /** SecretStorage key. */
  key: string;
  /** Environment variable the server reads. */
  env: string;
  /** Words for prompts and messages. */
  label: string;
  /** The server notification (`{value}`) that gives a running server a new value; none: a change restarts it. */
  notification?: string;
}

export const RUNNER_TOKEN: SecretKind = {
  key: 'nkiAgent.runnerToken', env: 'NKI_AGENT_RUNNER_TOKEN', label: 'runner token', notification: CLIENT_NOTIFICATIONS.runnerToken,
};
export const ANTHROPIC_KEY: SecretKind = { key: 'nkiAgent.anthropicApiKey', env: 'ANTHROPIC_API_KEY', label: 'Anthropic API key' };
export const SECRET_KINDS: readonly SecretKind[] = [RUNNER_TOKEN, ANTHROPIC_KEY];

/** The server's environment: the extension host's, with every stored secret set (a stored secret wins). */
export function serverEnv(base: NodeJS.ProcessEnv, stored: ReadonlyMap<SecretKind, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...base };
  for (const [kind, value] of stored) {
    if (value) {
      env[kind.env] = value;
    }
  }
  return env;
}

/** What the log may say about the environment: the names of the variables set from SecretStorage. */
export function describeSecretEnv(stored: ReadonlyMap<SecretKind, string>): string {
  const names = [...stored].filter(([, v]) => v).map(([k]) => k.env);
  return names.length ? `${names.join(', ')} from SecretStorage` : 'no secrets from SecretStorage';
}

export class Secrets {
  constructor(private readonly storage: vscode.SecretStorage) {}

  /** Every stored secret (missing ones left out). */
  async all(): Promise<Map<SecretKind, string>> {
    const out = new Map<SecretKind, string>();
    for (const kind of SECRET_KINDS) {
      const v = await this.storage.get(kind.key);
      if (v) {
        out.set(kind, v);
      }
    }
    return out;
  }

  async has(kind: SecretKind): Promise<boolean> {
    return Boolean(await this.storage.get(kind.key));
  }

  /** Stores `value` ('' deletes the secret). */
  async set(kind: SecretKind, value: string): Promise<void> {
    if (value) {
      await this.storage.store(kind.key, value);
    } else {
      await this.storage.delete(kind.key);
    }
  }

  onDidChange(listener: (kind: SecretKind) => void): vscode.Disposable {
    return this.storage.onDidChange((e) => {
      const kind = SECRET_KINDS.find((k) => k.key === e.key);
      if (kind) {
        listener(kind);
      }
    });
  }

  /** Asks for a secret in a password box and stores it; false when the user cancelled. */
  async prompt(kind: SecretKind): Promise<boolean> {
    const value = await vscode.window.showInputBox({
      title: `NKI Agent: ${kind.label}`,
      prompt: `The ${kind.label}, kept in VS Code's secret storage and passed to the server as ${kind.env}. Leave empty to remove it.`,
      password: true,
      ignoreFocusOut: true,
    });
    if (value === undefined) {
      return false;
    }
    await this.set(kind, value.trim());
    const how = kind.notification ? 'the running server uses it from now on' : 'the server restarts to use it';
    void vscode.window.showInformationMessage(
      value.trim() ? `NKI Agent: ${kind.label} saved; ${how}.` : `NKI Agent: ${kind.label} removed.`);
    return true;
  }
}

/** True when a model-backend chain (`nkiAgent.modelBackend`) names the Anthropic backend. */
export function chainNeedsAnthropicKey(chain: string): boolean {
  return chain.split(',').some((s) => /^anthropic(\b|:|@|$)/.test(s.trim()));
}
