// Interpreter discovery: which Python runs the server. Order: the one picked with "Select interpreter"
// for this workspace (kept in the extension's workspace state, VS Code's storage, never a file of the
// workspace), else the `nkiAgent.interpreter` setting at user level (machine-scoped: a workspace's
// settings cannot name the Python that runs; used as given, even when it does not exist, so a wrong path
// is reported rather than skipped), else the Python extension's active environment (when ms-python is
// installed), else `python3` on PATH.
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

export type InterpreterSource = 'setting' | 'picked' | 'python-extension' | 'path';

export interface Interpreter {
  path: string;
  source: InterpreterSource;
}

/** Where discovery looks; injected so tests can fake each source. */
export interface InterpreterSources {
  /** The raw `nkiAgent.interpreter` value at user level ('' or undefined when unset). */
  setting(): string | undefined;
  /** The interpreter chosen with "Select interpreter" and kept in the workspace state, if any. */
  picked?(): string | undefined;
  /** The first workspace folder's path, for `${workspaceFolder}` and relative settings. */
  workspaceFolder(): string | undefined;
  /** The Python extension's active interpreter, or undefined (not installed, no environment). */
  pythonExtension(): Promise<string | undefined>;
  /** An executable of this name on PATH, or undefined. */
  which(name: string): Promise<string | undefined>;
}

export const PATH_NAMES = ['python3', 'python'] as const;

/** `${workspaceFolder}`, `${userHome}` and `~` expanded; a relative path resolved against the workspace. */
export function expandSetting(raw: string, workspaceFolder: string | undefined, home = os.homedir()): string {
  let p = raw.trim();
  if (workspaceFolder !== undefined) {
    p = p.split('${workspaceFolder}').join(workspaceFolder);
  }
  p = p.split('${userHome}').join(home);
  if (p === '~' || p.startsWith('~/')) {
    p = path.join(home, p.slice(1));
  }
  if (!path.isAbsolute(p) && workspaceFolder !== undefined && (p.includes('/') || p.includes(path.sep))) {
    p = path.resolve(workspaceFolder, p);
  }
  return p;
}

/** The interpreter to use, or undefined when no source has one. */
export async function discoverInterpreter(src: InterpreterSources): Promise<Interpreter | undefined> {
  const picked = src.picked?.();
  if (picked) {
    return { path: picked, source: 'picked' };
  }
  const raw = src.setting();
  if (raw !== undefined && raw.trim() !== '') {
    return { path: expandSetting(raw, src.workspaceFolder()), source: 'setting' };
  }
  let fromExt: string | undefined;
  try {
    fromExt = await src.pythonExtension();
  } catch {
    fromExt = undefined; // a broken Python extension must not stop the server
  }
  if (fromExt) {
    return { path: fromExt, source: 'python-extension' };
  }
  for (const name of PATH_NAMES) {
    const found = await src.which(name);
    if (found) {
      return { path: found, source: 'path' };
    }
  }
  return undefined;
}

/** `name` on the PATH of `env` (an executable regular file), like `which`. */
export async function whichOnPath(name: string, env: NodeJS.ProcessEnv = process.env): Promise<string | undefined> {
  const dirs = (env.PATH ?? '').split(path.delimiter).filter((d) => d !== '');
  const exts = process.platform === 'win32' ? ['.exe', ''] : [''];
  for (const dir of dirs) {
    for (const ext of exts) {
      const cand = path.join(dir, name + ext);
      try {
        const st = await fs.promises.stat(cand);
        if (st.isFile()) {
          await fs.promises.access(cand, fs.constants.X_OK);
          return cand;
        }
      } catch {
        // not here
      }
    }
  }
  return undefined;
}

/** Words for the log and messages: where the interpreter came from. */
export function describeSource(source: InterpreterSource): string {
  switch (source) {
    case 'setting':
      return 'the nkiAgent.interpreter setting';
    case 'picked':
      return 'your "Select interpreter" choice';
    case 'python-extension':
      return "the Python extension's selected environment";
    case 'path':
      return 'PATH';
  }
}
