// Runner state for the status bar: local (no nkiAgent.runnerUrl), a remote runner that answers its
// public `GET /healthz`, or one that is unreachable. Probed when the URL changes and every minute while
// one is set; `fetch` is injected so tests need no network. Also what choosing a runner means for saves.

export type RunnerState =
  | { kind: 'local' }
  | { kind: 'remote'; url: string; backend: string }
  | { kind: 'unreachable'; url: string; reason: string }
  | { kind: 'checking'; url: string };

export type Fetch = (url: string, init: { signal: AbortSignal }) => Promise<{ ok: boolean; status: number; json(): Promise<unknown> }>;

export const PROBE_TIMEOUT_MS = 5000;
export const PROBE_INTERVAL_MS = 60_000;

export function healthUrl(runnerUrl: string): string {
  return runnerUrl.replace(/\/+$/, '') + '/healthz';
}

export async function probeRunner(runnerUrl: string, fetchFn: Fetch = fetch as unknown as Fetch,
  timeoutMs = PROBE_TIMEOUT_MS): Promise<RunnerState> {
  const url = runnerUrl.trim();
  if (!url) {
    return { kind: 'local' };
  }
  if (!/^https?:\/\//.test(url)) {
    return { kind: 'unreachable', url, reason: 'not an http(s) URL' };
  }
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), timeoutMs);
  try {
    const res = await fetchFn(healthUrl(url), { signal: ctl.signal });
    if (!res.ok) {
      return { kind: 'unreachable', url, reason: `HTTP ${res.status}` };
    }
    const body = (await res.json().catch(() => ({}))) as { ok?: unknown; backend?: unknown };
    if (body.ok !== true) {
      return { kind: 'unreachable', url, reason: 'not an NKI Agent runner (no ok in /healthz)' };
    }
    return { kind: 'remote', url, backend: typeof body.backend === 'string' ? body.backend : '' };
  } catch (e) {
    const reason = ctl.signal.aborted ? `no answer in ${timeoutMs / 1000} s` : networkReason(e);
    return { kind: 'unreachable', url, reason };
  } finally {
    clearTimeout(timer);
  }
}

type NetError = { message?: string; code?: string; cause?: NetError; errors?: NetError[] };

/** The useful part of a failed fetch: undici puts the socket error (ECONNREFUSED, ENOTFOUND, …) in
 *  `cause`, or in `cause.errors` when several addresses were tried. */
export function networkReason(e: unknown): string {
  const err = e as NetError | undefined;
  const c = err?.cause;
  return c?.code ?? c?.errors?.find((x) => x.code)?.code ?? c?.message ?? err?.message ?? String(e);
}

/** `nkiAgent.verifyOnSave` once the runner is `runnerUrl` ('' = local): a remote runner makes saves verify on it
 *  ("remote"; the local simulation still runs for hovers); going back to local keeps verifying on save, locally;
 *  any other value stays. Picking a runner alone must make saves use it. */
export function verifyOnSaveWith(runnerUrl: string, mode: string): string {
  if (runnerUrl.trim()) {
    return 'remote';
  }
  return mode === 'remote' ? 'local' : mode;
}

/** Short host:port for the status bar. */
export function shortUrl(url: string): string {
  try {
    return new URL(url).host || url;
  } catch {
    return url;
  }
}
