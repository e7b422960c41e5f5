// Machine-scoped settings: the ones that decide where files and keys go or what runs (the runner's URL
// and token file, the model backends, the interpreter, trustLocal, compilerBackend). package.json declares them
// "scope": "machine" (generated from server/settings.py) and lists them as restricted for untrusted
// workspaces, so a cloned repository's .vscode/settings.json cannot set them. The extension reads
// them at user level only (`inspect().globalValue`, else the default) — never a workspace's value,
// whatever the VS Code version — and the server takes them only from initializationOptions, so a
// change restarts the server.

/** The machine-scoped keys of the `nkiAgent` section (a unit test keeps them equal to package.json's). */
export const MACHINE_SETTINGS = ['compilerBackend', 'interpreter', 'modelBackend', 'runnerTokenFile', 'runnerUrl', 'trustLocal'] as const;
export type MachineSetting = (typeof MACHINE_SETTINGS)[number];

/** What `WorkspaceConfiguration.inspect` answers (the layers the extension looks at). */
export interface Inspected {
  defaultValue?: unknown;
  globalValue?: unknown;
  workspaceValue?: unknown;
  workspaceFolderValue?: unknown;
}

/** `inspect` of one key of the section (undefined: not a registered setting). */
export type Inspector = (key: string) => Inspected | undefined;

export function isMachineSetting(key: string): key is MachineSetting {
  return (MACHINE_SETTINGS as readonly string[]).includes(key);
}

/** The user-level value of `key`: the user's (global) setting, else the default — never a workspace's. */
export function userValue<T>(inspect: Inspector, key: string): T | undefined {
  const i = inspect(key);
  return (i?.globalValue ?? i?.defaultValue) as T | undefined;
}

/** The settings sent to the server: the effective values, with every machine-scoped one at user level. */
export function serverSettings(effective: Record<string, unknown>, inspect: Inspector): Record<string, unknown> {
  const out: Record<string, unknown> = { ...effective };
  for (const key of MACHINE_SETTINGS) {
    const v = userValue(inspect, key);
    if (v === undefined) {
      delete out[key];
    } else {
      out[key] = v;
    }
  }
  return out;
}

/** The machine-scoped keys a configuration change touches (`affects` is the event's affectsConfiguration). */
export function machineKeysChanged(section: string, affects: (setting: string) => boolean): MachineSetting[] {
  return MACHINE_SETTINGS.filter((k) => affects(`${section}.${k}`));
}

/** Workspace-level values of machine-scoped settings, which are ignored (for one log line). */
export function ignoredWorkspaceValues(inspect: Inspector): MachineSetting[] {
  return MACHINE_SETTINGS.filter((k) => {
    const i = inspect(k);
    return i !== undefined && (i.workspaceValue !== undefined || i.workspaceFolderValue !== undefined);
  });
}
