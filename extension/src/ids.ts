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
} as const;

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
