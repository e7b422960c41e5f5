// The names the extension shares with its manifest, VS Code and the language server: command ids,
// setting keys, SecretStorage keys, environment variables and the server's own command names.
// Every other module reads them from here (package.json lists the same command ids).

/** The settings section; `contributes.configuration` is generated from the server's schema. */
export const SECTION = 'nkiAgent';

/** Extension-only setting: the Python that runs the server (read by the extension, ignored by the server). */
export const INTERPRETER_SETTING = 'interpreter';

/** Palette commands (contributed in package.json). */
export const COMMANDS = {
  fixKernel: 'nkiAgent.fixKernel',
  verifyNow: 'nkiAgent.verifyNow',
  explainDiagnostic: 'nkiAgent.explainDiagnostic',
  selectTarget: 'nkiAgent.selectTarget',
  selectRunner: 'nkiAgent.selectRunner',
  restartServer: 'nkiAgent.restartServer',
  setRunnerToken: 'nkiAgent.setRunnerToken',
  setAnthropicApiKey: 'nkiAgent.setAnthropicApiKey',
  selectInterpreter: 'nkiAgent.selectInterpreter',
  installServer: 'nkiAgent.installServer',
  showLog: 'nkiAgent.showLog',
  showKernelReport: 'nkiAgent.showKernelReport',
  /** Accept / Reject the agent's fix shown in the diff preview (its editor title and the palette while one is open). */
  acceptFix: 'nkiAgent.acceptFix',
  rejectFix: 'nkiAgent.rejectFix',
  /** Not in the palette: the status bar item's menu. */
  statusMenu: 'nkiAgent.statusMenu',
} as const;

/** workspace/executeCommand names the server registers (server/handlers/commands.py, agent_fix.py). */
export const SERVER_COMMANDS = {
  verify: 'nki.verify',
  explainError: 'nki.explainError',
  fixKernel: 'nki.fixKernel',
  cancelAgent: 'nki.cancelAgent',
} as const;

/** Server notifications the extension listens to. */
export const SERVER_NOTIFICATIONS = {
  agentResult: 'nki/agentResult',
  agentProgress: 'nki/agentProgress',
} as const;

/** Notifications the extension sends the server (server/handlers/lifecycle.py). */
export const CLIENT_NOTIFICATIONS = {
  /** `{value}`: the runner token from SecretStorage ('' = none), taken by the running server without a restart. */
  runnerToken: 'nki/runnerToken',
} as const;

/** Custom requests of the server. */
export const SERVER_REQUESTS = {
  kernelReport: 'nki/kernelReport',
} as const;

/** The label of the server's workspace/applyEdit carrying the agent's fix (server/handlers/agent_fix.py). */
export const AGENT_FIX_LABEL = 'NKI Agent: fix kernel';
/** applyEdit failureReason when the user rejects the previewed fix (agent_fix.REJECTED: "rejected", not stale). */
export const AGENT_FIX_REJECTED = 'rejected by the user';
/** Context key set while an agent fix preview waits for Accept / Reject. */
export const PREVIEW_CONTEXT = 'nkiAgent.fixPreviewOpen';
/** URI scheme of the virtual documents the diff preview shows (the current and the proposed text). */
export const PREVIEW_SCHEME = 'nki-agent-fix';

/** The server's module: `python -m nki_agent.server`. */
export const SERVER_MODULE = 'nki_agent.server';
export const PACKAGE_IMPORT = 'nki_agent';
/** The distribution name on a package index (the fallback install source). */
export const PACKAGE_NAME = 'nki-agent';
export const MIN_PYTHON: readonly [number, number] = [3, 11];

/** Diagnostic sources of the server (`nki-check`, `nki-sim`, `nki-verify`, `nki-runner`, `nki-agent`). */
export function isServerDiagnosticSource(source: string | undefined): boolean {
  return source !== undefined && source.startsWith('nki-');
}

export const TARGETS = ['auto', 'trn1', 'trn2', 'trn3'] as const;
export type Target = (typeof TARGETS)[number];
