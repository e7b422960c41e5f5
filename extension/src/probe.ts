// The interpreter check before the server starts: runs a tiny script in the chosen Python that
// reports its version and whether `nki_agent` (and the server's dependencies) import, and turns the
// answer, or the failure to run at all, into one typed result.
import { execFile } from 'child_process';
import { MIN_PYTHON, PACKAGE_IMPORT } from './ids';

export const PROBE_MARKER = 'NKI_AGENT_PROBE ';

/** Valid on any Python 2.7/3.x, so an old interpreter still reports its version instead of a SyntaxError. */
export const PROBE_SCRIPT = [
  'import json, sys',
  'out = {"executable": sys.executable, "version": list(sys.version_info[:3])}',
  `if sys.version_info[:2] >= (${MIN_PYTHON[0]}, ${MIN_PYTHON[1]}):`,
  '    try:',
  `        import importlib.util, ${PACKAGE_IMPORT}`,
  `        out["package"] = getattr(${PACKAGE_IMPORT}, "__version__", "unknown")`,
  '        missing = [m for m in ("nki_agent.server", "pygls", "lsprotocol", "pydantic") if importlib.util.find_spec(m) is None]',
  '        if missing:',
  '            out["error"] = "missing modules: " + ", ".join(missing)',
  '    except Exception as e:',
  '        out["error"] = "%s: %s" % (type(e).__name__, e)',
  `sys.stdout.write("${PROBE_MARKER}" + json.dumps(out) + "\\n")`,
].join('\n');

export type ProbeResult =
  | { kind: 'ok'; executable: string; version: string; packageVersion: string }
  | { kind: 'missing'; detail: string } // the interpreter cannot be started (no such file, not executable)
  | { kind: 'too-old'; executable: string; version: string }
  | { kind: 'no-package'; executable: string; version: string; detail: string }
  | { kind: 'failed'; detail: string }; // it ran but did not answer (a shim's error, a timeout, a crash)

export interface RawRun {
  stdout: string;
  stderr: string;
  exitCode: number | null;
  /** Set when the process could not be started or was killed (ENOENT, EACCES, ETIMEDOUT). */
  errorCode?: string;
  errorMessage?: string;
}

function lastLines(text: string, n = 5): string {
  return text.trim().split(/\r?\n/).slice(-n).join('\n');
}

/** The typed verdict of one probe run. */
export function parseProbe(run: RawRun): ProbeResult {
  if (run.errorCode === 'ENOENT' || run.errorCode === 'EACCES' || run.errorCode === 'ENOTDIR') {
    return { kind: 'missing', detail: run.errorMessage ?? run.errorCode };
  }
  if (run.errorCode === 'ETIMEDOUT') {
    return { kind: 'failed', detail: 'the interpreter did not answer in time' };
  }
  const line = run.stdout.split(/\r?\n/).find((l) => l.startsWith(PROBE_MARKER));
  if (line === undefined) {
    const why = lastLines(run.stderr) || lastLines(run.stdout) || run.errorMessage || `exit code ${run.exitCode}`;
    return { kind: 'failed', detail: why };
  }
  let data: { executable?: unknown; version?: unknown; package?: unknown; error?: unknown };
  try {
    data = JSON.parse(line.slice(PROBE_MARKER.length)) as typeof data;
  } catch {
    return { kind: 'failed', detail: `unreadable answer: ${line.slice(0, 200)}` };
  }
  const v = Array.isArray(data.version) ? data.version.map((x) => Number(x)) : [];
  if (v.length < 2 || v.some((x) => !Number.isInteger(x))) {
    return { kind: 'failed', detail: `unreadable answer: ${line.slice(0, 200)}` };
  }
  const version = v.join('.');
  const executable = typeof data.executable === 'string' ? data.executable : '';
  if (v[0] < MIN_PYTHON[0] || (v[0] === MIN_PYTHON[0] && v[1] < MIN_PYTHON[1])) {
    return { kind: 'too-old', executable, version };
  }
  if (typeof data.error === 'string' || typeof data.package !== 'string') {
    const detail = typeof data.error === 'string' ? data.error : `${PACKAGE_IMPORT} did not import`;
    return { kind: 'no-package', executable, version, detail };
  }
  return { kind: 'ok', executable, version, packageVersion: data.package };
}

export interface RunOptions {
  timeoutMs: number;
  cwd?: string;
  env?: NodeJS.ProcessEnv;
}

export type Runner = (cmd: string, args: string[], opts: RunOptions) => Promise<RawRun>;

/** Runs a process and collects its output (never rejects). */
export const runProcess: Runner = (cmd, args, opts) =>
  new Promise((resolve) => {
    const o = { timeout: opts.timeoutMs, cwd: opts.cwd, env: opts.env, maxBuffer: 1 << 20, windowsHide: true };
    execFile(cmd, args, o, (err, stdout, stderr) => {
      const e = err as (NodeJS.ErrnoException & { killed?: boolean }) | null;
      let errorCode = typeof e?.code === 'string' ? e.code : undefined;
      if (e?.killed) {
        errorCode = 'ETIMEDOUT';
      }
      resolve({
        stdout: String(stdout ?? ''),
        stderr: String(stderr ?? ''),
        exitCode: typeof e?.code === 'number' ? e.code : e ? null : 0,
        errorCode,
        errorMessage: e?.message,
      });
    });
  });

export const PROBE_TIMEOUT_MS = 30_000; // an asdf/pyenv shim's first call can be slow

/** Probes `python` the way the server will be started: same working directory and environment. */
export async function probeInterpreter(python: string, opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {},
  run: Runner = runProcess): Promise<ProbeResult> {
  return parseProbe(await run(python, ['-c', PROBE_SCRIPT], { timeoutMs: PROBE_TIMEOUT_MS, ...opts }));
}
