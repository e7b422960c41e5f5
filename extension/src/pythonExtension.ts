// The optional ms-python integration: the active environment of the Python extension through
// `@vscode/python-extension`, loaded only when ms-python.python is installed, so the extension works
// without it. Also its "environment changed" event (a restart trigger) and its interpreter picker.
import * as vscode from 'vscode';

export const PYTHON_EXTENSION_ID = 'ms-python.python';

type Api = {
  environments: {
    getActiveEnvironmentPath(resource?: vscode.Uri): { path: string };
    resolveEnvironment(env: { path: string } | string): Promise<{ executable: { uri?: vscode.Uri } } | undefined>;
    onDidChangeActiveEnvironmentPath: vscode.Event<unknown>;
  };
};

/** Loads the API module lazily; replaced in tests. */
export type ApiLoader = () => Promise<Api>;

const defaultLoader: ApiLoader = async () => {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const mod = require('@vscode/python-extension') as { PythonExtension: { api(): Promise<Api> } };
  return mod.PythonExtension.api();
};

export class PythonExtension {
  private api: Api | undefined;

  constructor(private readonly loader: ApiLoader = defaultLoader) {}

  /** True when ms-python.python is installed (enabled or not yet activated). */
  installed(): boolean {
    return vscode.extensions.getExtension(PYTHON_EXTENSION_ID) !== undefined;
  }

  private async load(): Promise<Api | undefined> {
    if (!this.installed()) {
      return undefined;
    }
    if (this.api === undefined) {
      this.api = await this.loader();
    }
    return this.api;
  }

  /** The active environment's executable for `resource`, or undefined (no extension, no environment). */
  async activeInterpreter(resource?: vscode.Uri): Promise<string | undefined> {
    const api = await this.load();
    if (api === undefined) {
      return undefined;
    }
    const active = api.environments.getActiveEnvironmentPath(resource);
    const env = await api.environments.resolveEnvironment(active);
    return env?.executable.uri?.fsPath ?? (active.path || undefined);
  }

  /** Calls `listener` whenever the user picks another environment; a no-op without ms-python. */
  async onDidChange(listener: () => void): Promise<vscode.Disposable | undefined> {
    const api = await this.load().catch(() => undefined);
    return api?.environments.onDidChangeActiveEnvironmentPath(() => listener());
  }
}
