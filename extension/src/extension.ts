// Activation: wires the modules together — log channel, secrets, status bar, interpreter sources,
// the server session and its UI, commands, and the events that restart the server (interpreter
// setting, Python extension environment, a secret other than the runner token, any machine-scoped setting) or refresh the status bar
// (target, runner URL), the server's work-done progress (the status bar's spinner), the per-kind inlay
// toggles (a change refreshes the hints), and the kernel report's source documents closing and opening.
// Machine-scoped settings are read at user level only (machineSettings.ts).
import * as fs from 'fs';
import * as vscode from 'vscode';
import { AgentProgressParams, AgentResultParams, AgentRuns } from './agentRuns';
import { connectionFactory, sectionInspector } from './client';
import { CommandDeps, registerCommands } from './commands';
import { FixPreview, agentFixEdit } from './fixPreview';
import {
  COMMANDS, INTERPRETER_SETTING, PREVIEW_SCHEME, SECTION, SERVER_COMMANDS, SERVER_NOTIFICATIONS, SERVER_REQUESTS,
} from './ids';
import { KernelReportPanels } from './kernelReport';
import { PreviewContent, vscodePreview } from './previewUi';
import { KernelReport } from './reportHtml';
import { installServer, installSource } from './install';
import { InterpreterSources, discoverInterpreter, whichOnPath } from './interpreter';
import { PICKED_KEY, selectInterpreter } from './interpreterPicker';
import { Log } from './log';
import { ignoredWorkspaceValues, machineKeysChanged, userValue } from './machineSettings';
import { probeInterpreter } from './probe';
import { PythonExtension } from './pythonExtension';
import { PROBE_INTERVAL_MS, RunnerState, probeRunner } from './runner';
import { Secrets } from './secrets';
import { CrashChoice, Session } from './session';
import { ACTIONS, SetupAction } from './setup';
import { StatusBar, statusView } from './statusBar';
import { ServerProgress } from './serverProgress';
import { inlayTogglesChanged } from './inlayKinds';

const RECENT_RUNNERS = 'nkiAgent.recentRunners';

/** Is `uri` open for the user: a live document the server has, shown in a tab (text or diff)? */
function sourceOpen(uri: string): boolean {
  const inTab = vscode.window.tabGroups.all.some((g) => g.tabs.some((t) => {
    const input = t.input;
    return (input instanceof vscode.TabInputText && input.uri.toString() === uri) ||
      (input instanceof vscode.TabInputTextDiff && (input.original.toString() === uri || input.modified.toString() === uri));
  }));
  return inTab && vscode.workspace.textDocuments.some((d) => !d.isClosed && d.uri.toString() === uri);
}
let session: Session | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const channel = vscode.window.createOutputChannel('NKI Agent', { log: true });
  const log = new Log(channel);
  const secrets = new Secrets(context.secrets);
  const python = new PythonExtension();
  const status = new StatusBar();
  context.subscriptions.push(channel, status);
  const cwd = context.globalStorageUri.fsPath;
  await fs.promises.mkdir(cwd, { recursive: true }).catch(() => undefined);

  const folder = () => vscode.workspace.workspaceFolders?.[0];
  const sources: InterpreterSources = {
    setting: () => userValue<string>(sectionInspector(), INTERPRETER_SETTING),
    picked: () => context.workspaceState.get<string>(PICKED_KEY),
    workspaceFolder: () => folder()?.uri.fsPath,
    pythonExtension: () => python.activeInterpreter(folder()?.uri),
    which: (name) => whichOnPath(name),
  };

  // agent runs (progress, spend), the fix's diff preview, the kernel report panels
  const agentRuns = new AgentRuns(async (uri) => session?.connection?.executeCommand(SERVER_COMMANDS.cancelAgent, [uri]));
  const content = new PreviewContent();
  const previewVs = vscodePreview(content);
  const preview = new FixPreview(previewVs.docs, previewVs.ui, (uri) => agentRuns.end(uri));
  const reports = new KernelReportPanels(async (uri, timeline) => {
    const conn = session?.connection;
    return conn === undefined ? `the language server is not running (${session?.state ?? 'starting'})`
      : await conn.sendRequest(SERVER_REQUESTS.kernelReport, { uri, timeline }) as KernelReport;
  }, sourceOpen);
  const progress = new ServerProgress();
  context.subscriptions.push(agentRuns, reports, progress,
    // a source tab replaced (a preview tab) or closed: VS Code may close the document much later
    vscode.window.tabGroups.onDidChangeTabs(() => void reports.reconcile()),
    vscode.workspace.onDidCloseTextDocument(() => void reports.reconcile()),
    vscode.workspace.onDidOpenTextDocument(() => void reports.reconcile()),
    vscode.workspace.registerTextDocumentContentProvider(PREVIEW_SCHEME, content),
    vscode.window.tabGroups.onDidChangeTabs((e) => {
      if (e.closed.some(previewVs.isPreviewDiff)) {
        preview.decide('reject'); // closing the diff is a "no"
      }
    }),
    vscode.languages.onDidChangeDiagnostics((e) => {
      const open = new Set(reports.open);
      for (const uri of e.uris) {
        if (open.has(uri.toString())) {
          void reports.refresh(uri.toString()); // a verification or simulation published: the report follows
        }
      }
    }));

  let runner: RunnerState = { kind: 'local' };
  const render = () => {
    if (session !== undefined && session.state !== 'running' && session.state !== 'starting') {
      agentRuns.endAll(); // no result will come from a stopped server
    }
    if (session !== undefined && session.state !== 'running') {
      progress.clear(); // restarting, crashed or stopped: no `end` will come for what it began
    }
    status.show(statusView(vscode.workspace.getConfiguration(SECTION).get<string>('target') ?? 'auto', runner,
      session?.state ?? 'starting', agentRuns.spend, progress.active));
  };
  context.subscriptions.push(agentRuns.onDidChangeSpend(() => render()), progress.onDidChange(() => render()));
  const showLog = () => channel.show(true);
  const pickStore = {
    get: (k: string) => context.workspaceState.get<string>(k),
    update: async (k: string, v: string | undefined) => {
      await context.workspaceState.update(k, v);
      if (k === PICKED_KEY) {
        session?.requestRestart('interpreter selected');
      }
    },
  };
  const pick = () => selectInterpreter(python, pickStore);

  const install = async (): Promise<void> => {
    const interp = session?.interpreter ?? await discoverInterpreter(sources);
    if (interp === undefined) {
      void vscode.window.showErrorMessage('NKI Agent: select a Python interpreter (3.11 or newer) first.', ACTIONS.select)
        .then((c) => c && pick());
      return;
    }
    const outcome = await installServer(interp.path, installSource(context.extensionPath), log, cwd);
    if (outcome.ok) {
      void vscode.window.showInformationMessage(`NKI Agent installed into ${interp.path}; starting the server.`);
      await session?.restartNow('installed into the interpreter');
    } else if (!outcome.cancelled) {
      const c = await vscode.window.showErrorMessage(`NKI Agent: installing into ${interp.path} failed: ${outcome.message}`,
        ACTIONS.showLog, ACTIONS.select);
      if (c === ACTIONS.showLog) {
        showLog();
      } else if (c === ACTIONS.select) {
        await pick();
      }
    }
  };

  const onNotification = (method: string, params: unknown) => {
    if (method === SERVER_NOTIFICATIONS.agentProgress) {
      agentRuns.progress(params as AgentProgressParams);
    } else if (method === SERVER_NOTIFICATIONS.agentResult) {
      const p = params as AgentResultParams;
      agentRuns.result(p);
      const how = p.applied ? ' (applied)' : p.rejected ? ' (rejected)' : p.stale ? ' (stale, not applied)' : '';
      log.info(`agent result for ${p.uri}: ${p.verdict}${how}, $${Number(p.dollars ?? 0).toFixed(4)}, ${p.tokens ?? 0} tokens`);
      if (typeof p.uri === 'string') {
        void reports.refresh(p.uri);
      }
    }
  };

  session = new Session({
    log,
    connect: connectionFactory(channel, onNotification, Object.values(SERVER_NOTIFICATIONS), (params) => {
      const fix = agentFixEdit(params);
      return fix === undefined ? undefined : preview.handle(fix);
    }, progress),
    discover: () => discoverInterpreter(sources),
    probe: (py) => probeInterpreter(py, { cwd, env: process.env }),
    secrets: () => secrets.all(),
    baseEnv: process.env,
    cwd,
    logLevel: () => channel.logLevel,
    onState: render,
    ui: {
      setupProblem: (problem) => {
        const labels = problem.actions.map((a) => ACTIONS[a]);
        void vscode.window.showErrorMessage(problem.message, ...labels).then(async (label) => {
          const action = (Object.keys(ACTIONS) as SetupAction[]).find((a) => ACTIONS[a] === label);
          if (action === 'install') {
            await install();
          } else if (action === 'select') {
            await pick();
          } else if (action === 'showLog') {
            showLog();
          }
        });
      },
      crashLoop: (n, lastError): Thenable<CrashChoice> => vscode.window.showErrorMessage(
        `NKI Agent: the language server stopped ${n} times in 3 minutes and will not be restarted automatically.` +
        (lastError ? ` Its last error: ${lastError}` : ''),
        'Show log', 'Restart').then((c) => (c === 'Show log' ? 'showLog' : c === 'Restart' ? 'restart' : undefined)),
      showLog,
    },
  });
  const s = session;

  let runnerTimer: ReturnType<typeof setInterval> | undefined;
  const refreshRunner = async () => {
    const url = userValue<string>(sectionInspector(), 'runnerUrl') ?? '';
    if (runnerTimer !== undefined) {
      clearInterval(runnerTimer);
      runnerTimer = undefined;
    }
    runner = url ? { kind: 'checking', url } : { kind: 'local' };
    render();
    if (url) {
      runner = await probeRunner(url);
      render();
      runnerTimer = setInterval(() => void probeRunner(url).then((r) => { runner = r; render(); }), PROBE_INTERVAL_MS);
    }
  };
  context.subscriptions.push({ dispose: () => runnerTimer !== undefined && clearInterval(runnerTimer) });

  const deps: CommandDeps = {
    session: s,
    secrets,
    showLog,
    selectInterpreter: () => pick(),
    install,
    recentRunners: () => context.globalState.get<string[]>(RECENT_RUNNERS) ?? [],
    rememberRunner: (url) => context.globalState.update(RECENT_RUNNERS,
      [url, ...(context.globalState.get<string[]>(RECENT_RUNNERS) ?? []).filter((u) => u !== url)].slice(0, 5)),
    agent: agentRuns,
    preview,
    reports,
  };
  context.subscriptions.push(...registerCommands(deps));
  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration((e) => {
      const machine = machineKeysChanged(SECTION, (k) => e.affectsConfiguration(k));
      if (machine.length) { // the server reads these only at start (initializationOptions)
        s.requestRestart(`${machine.map((k) => `${SECTION}.${k}`).join(', ')} changed`);
      }
      if (e.affectsConfiguration(`${SECTION}.runnerUrl`)) {
        void refreshRunner();
      }
      if (e.affectsConfiguration(`${SECTION}.target`)) {
        render();
      }
      if (inlayTogglesChanged((k) => e.affectsConfiguration(k))) {
        s.connection?.refreshInlayHints?.(); // the middleware reads the toggles at each request
      }
    }),
    secrets.onDidChange((kind) => void s.secretChanged(kind)), // the runner token goes live; other secrets restart
    channel.onDidChangeLogLevel((level) => s.setLogLevel(level)),
    { dispose: () => void s.dispose() },
  );
  const envSub = await python.onDidChange(() => {
    if (s.interpreter?.source !== 'setting') {
      s.requestRestart('Python extension environment changed');
    }
  }).catch(() => undefined);
  if (envSub) {
    context.subscriptions.push(envSub);
  }
  void refreshRunner();
  render();
  const ignored = ignoredWorkspaceValues(sectionInspector());
  if (ignored.length) {
    log.warn(`workspace settings ignored (machine-scoped, read from your user settings only): ${ignored.map((k) => `${SECTION}.${k}`).join(', ')}`);
  }
  log.info(`NKI Agent ${context.extension.packageJSON.version as string}; commands: ${Object.values(COMMANDS).length}`);
  await s.start();
}

export async function deactivate(): Promise<void> {
  await session?.dispose();
  session = undefined;
}
