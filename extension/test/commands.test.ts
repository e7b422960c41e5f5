import * as assert from 'node:assert/strict';
import { beforeEach, test } from 'node:test';
import { fake, FakeSecretStorage, Position, Range, Uri } from './fake-vscode';
import { CommandDeps, decideFix, diagnosticCode, diagnosticsFor, fixKernel, missingAnthropicKey, selectRunner, selectTarget, showKernelReport, validRunnerUrl, verifyNow } from '../src/commands';
import { verifyOnSaveWith } from '../src/runner';
import { ANTHROPIC_KEY, RUNNER_TOKEN, Secrets } from '../src/secrets';
import { Session } from '../src/session';

beforeEach(() => { fake.reset(); agentCalls.length = 0; decisions.length = 0; reportsShown.length = 0; });

const diag = (code: unknown, source: string, line: number) =>
  ({ code, source, message: `m${line}`, range: new Range(new Position(line, 0), new Position(line, 10)) });

test('the diagnostic to explain: ours under the cursor, else all of ours in the file', () => {
  const all = [diag('err_a', 'nki-check', 3), diag({ value: 'sim_b', target: 'x' }, 'nki-sim', 7), diag('E501', 'ruff', 3)];
  assert.deepEqual(diagnosticsFor(all as never, new Position(3, 4) as never).map((d) => diagnosticCode(d)), ['err_a']);
  assert.deepEqual(diagnosticsFor(all as never, new Position(20, 0) as never).map((d) => diagnosticCode(d)), ['err_a', 'sim_b']);
  assert.deepEqual(diagnosticsFor([diag('E501', 'ruff', 1)] as never, undefined), []);
});

test('runner URL validation', () => {
  assert.equal(validRunnerUrl('http://trn-host:8765'), undefined);
  assert.equal(validRunnerUrl('https://10.0.0.1'), undefined);
  assert.ok(validRunnerUrl('trn-host:8765'));
  assert.ok(validRunnerUrl(''));
});

const agentCalls: string[] = [];
const decisions: string[] = [];
const reportsShown: string[] = [];

function deps(executed: { command: string; args: unknown[] }[], storage = new FakeSecretStorage(), started = true): CommandDeps {
  const session = {
    state: 'running',
    connection: { executeCommand: async (command: string, args: unknown[]) => { executed.push({ command, args }); return { started }; } },
    restartNow: async () => undefined,
  } as unknown as Session;
  const running: string[] = [];
  return {
    session, secrets: new Secrets(storage as never), showLog: () => undefined, selectInterpreter: async () => undefined,
    install: async () => undefined, recentRunners: () => [], rememberRunner: async () => undefined,
    agent: {
      begin: (uri: string) => { agentCalls.push(`begin ${uri}`); running.push(uri); },
      end: (uri: string) => { agentCalls.push(`end ${uri}`); running.splice(running.indexOf(uri), 1); },
      get running() { return running; },
    },
    preview: { open: false, decide: (d: string) => { decisions.push(d); return d === 'accept'; } },
    reports: { show: async (uri: string) => { reportsShown.push(uri); } },
  };
}

test('Verify now and Fix kernel call the server commands with the document URI', async () => {
  const executed: { command: string; args: unknown[] }[] = [];
  fake.activeTextEditor = { document: { languageId: 'python', uri: Uri.file('/ws/k.py') } };
  await verifyNow(deps(executed));
  await fixKernel(deps(executed));
  assert.deepEqual(executed, [{ command: 'nki.verify', args: ['file:///ws/k.py'] },
    { command: 'nki.fixKernel', args: [{ uri: 'file:///ws/k.py', progress: 'client' }] }]);
  assert.deepEqual(agentCalls, ['begin file:///ws/k.py']); // the progress stays until the preview or the result
});

test('Fix kernel that the server does not start closes its progress; a second run on the same kernel is refused here', async () => {
  const executed: { command: string; args: unknown[] }[] = [];
  fake.activeTextEditor = { document: { languageId: 'python', uri: Uri.file('/ws/k.py') } };
  await fixKernel(deps(executed, new FakeSecretStorage(), false));
  assert.deepEqual(agentCalls, ['begin file:///ws/k.py', 'end file:///ws/k.py']);
  const d = deps(executed);
  await fixKernel(d);
  await fixKernel(d);
  assert.equal(executed.length, 2);
  assert.match(fake.shown.at(-1)!.message, /already fixing this kernel/);
});

test('Show kernel report opens the active kernel\'s panel; Accept / Reject decide the open preview', async () => {
  fake.activeTextEditor = { document: { languageId: 'python', uri: Uri.file('/ws/k.py') } };
  await showKernelReport(deps([]));
  assert.deepEqual(reportsShown, ['file:///ws/k.py']);
  decideFix(deps([]), 'accept');
  assert.equal(fake.shown.length, 0);
  decideFix(deps([]), 'reject'); // the fake preview has nothing to reject
  assert.deepEqual(decisions, ['accept', 'reject']);
  assert.match(fake.shown[0].message, /no agent fix is waiting/);
});

test('Fix kernel with an Anthropic backend and no key: one message with a way out, no agent run', async () => {
  const executed: { command: string; args: unknown[] }[] = [];
  fake.activeTextEditor = { document: { languageId: 'python', uri: Uri.file('/ws/k.py') } };
  fake.config.set('nkiAgent.modelBackend', 'rules,anthropic');
  const saved = process.env.ANTHROPIC_API_KEY;
  delete process.env.ANTHROPIC_API_KEY;
  try {
    fake.answers.push('Use the rules backend');
    await fixKernel(deps(executed));
    assert.deepEqual(executed, []);
    const msg = fake.shown.find((s) => s.kind === 'warning')!;
    assert.match(msg.message, /needs an Anthropic API key/);
    assert.deepEqual(msg.items, ['Set Anthropic API key', 'Use the rules backend']);
    // machine-scoped: written to the user settings (ConfigurationTarget.Global), never the workspace's
    assert.deepEqual(fake.configWrites.map((w) => [w.key, w.value, w.target]), [['nkiAgent.modelBackend', 'rules', 1]]);
    const storage = new FakeSecretStorage();
    await storage.store(ANTHROPIC_KEY.key, 'sk-ant-xyz1');
    assert.equal(await missingAnthropicKey('anthropic', new Secrets(storage as never), {}), false);
    assert.equal(await missingAnthropicKey('anthropic', new Secrets(new FakeSecretStorage() as never), { ANTHROPIC_API_KEY: 'k' }), false);
  } finally {
    if (saved !== undefined) process.env.ANTHROPIC_API_KEY = saved;
  }
});

test('Select target writes nkiAgent.target (workspace scope with a folder open) and says which file', async () => {
  fake.workspaceFolders = [{ uri: Uri.file('/ws') }];
  fake.answers.push('trn2');
  await selectTarget();
  assert.deepEqual(fake.configWrites, [{ key: 'nkiAgent.target', value: 'trn2', target: 2 }]);
  assert.deepEqual(fake.shown[0].items, ['auto', 'trn1', 'trn2', 'trn3']);
  assert.deepEqual(fake.shown.slice(1).map((m) => [m.kind, m.message]),
    [['info', 'NKI Agent: target trn2 (nkiAgent.target) written to /ws/.vscode/settings.json.']]);
});

test('Select target: a user-level target is changed where it is set; a multi-root workspace names its file; no folder: user', async () => {
  fake.workspaceFolders = [{ uri: Uri.file('/ws') }];
  fake.config.set('nkiAgent.target', 'trn1');
  fake.answers.push('trn3');
  await selectTarget();
  assert.deepEqual(fake.configWrites.map((w) => w.target), [1]);
  assert.match(fake.shown.at(-1)!.message, /written to your user settings\.$/);

  fake.reset();
  fake.workspaceFolders = [{ uri: Uri.file('/a') }, { uri: Uri.file('/b') }];
  fake.workspaceFile = Uri.file('/home/me/proj.code-workspace');
  fake.answers.push('trn2');
  await selectTarget();
  assert.deepEqual(fake.configWrites.map((w) => w.target), [2]);
  assert.match(fake.shown.at(-1)!.message, /written to the workspace file \/home\/me\/proj\.code-workspace\.$/);

  fake.reset();
  fake.answers.push('trn2');
  await selectTarget();
  assert.deepEqual(fake.configWrites.map((w) => w.target), [1]);
  assert.match(fake.shown.at(-1)!.message, /written to your user settings\.$/);
});

test('what choosing a runner means for verifyOnSave', () => {
  assert.equal(verifyOnSaveWith('http://trn:8765', 'off'), 'remote');
  assert.equal(verifyOnSaveWith('http://trn:8765', 'local'), 'remote');
  assert.equal(verifyOnSaveWith('', 'remote'), 'local');
  assert.equal(verifyOnSaveWith('', 'off'), 'off');
  assert.equal(verifyOnSaveWith('', 'local'), 'local');
});

function runnerDeps(storage = new FakeSecretStorage()): CommandDeps {
  return { ...deps([], storage), recentRunners: () => ['http://trn:8765'] };
}

test('Select runner alone makes saves verify on it: runnerUrl and verifyOnSave "remote" in the user settings, said in one message', async () => {
  fake.workspaceFolders = [{ uri: Uri.file('/ws') }];
  const storage = new FakeSecretStorage();
  await storage.store(RUNNER_TOKEN.key, 'tok');
  fake.answers.push('$(remote) http://trn:8765');
  await selectRunner(runnerDeps(storage));
  assert.deepEqual(fake.configWrites, [
    { key: 'nkiAgent.runnerUrl', value: 'http://trn:8765', target: 1 },
    { key: 'nkiAgent.verifyOnSave', value: 'remote', target: 1 }]);
  assert.deepEqual(fake.shown.slice(1).map((m) => [m.kind, m.message, m.items]), [['info',
    'NKI Agent: saved kernels with a task now verify on the runner http://trn:8765 (wrote nkiAgent.runnerUrl to your ' +
    'user settings (machine-scoped); nkiAgent.verifyOnSave "remote" to your user settings).', []]]);
});

test('Select runner: a workspace verifyOnSave is changed in the workspace file (else it would win); no token: the same message asks for it', async () => {
  fake.workspaceFolders = [{ uri: Uri.file('/ws') }];
  fake.workspaceConfig.set('nkiAgent.verifyOnSave', 'off');
  const saved = process.env[RUNNER_TOKEN.env];
  delete process.env[RUNNER_TOKEN.env];
  try {
    fake.answers.push('$(remote) http://trn:8765');
    await selectRunner(runnerDeps());
  } finally {
    if (saved !== undefined) process.env[RUNNER_TOKEN.env] = saved;
  }
  assert.deepEqual(fake.configWrites.map((w) => [w.key, w.value, w.target]),
    [['nkiAgent.runnerUrl', 'http://trn:8765', 1], ['nkiAgent.verifyOnSave', 'remote', 2]]);
  const msg = fake.shown.at(-1)!;
  assert.match(msg.message, /nkiAgent\.verifyOnSave "remote" to \/ws\/\.vscode\/settings\.json\)\. It needs its bearer token\.$/);
  assert.deepEqual(msg.items, ['Set runner token']);
});

test('Select runner: back to Local keeps verifying on save, locally; with verifyOnSave off only the runner changes', async () => {
  fake.config.set('nkiAgent.runnerUrl', 'http://trn:8765');
  fake.config.set('nkiAgent.verifyOnSave', 'remote');
  fake.answers.push('$(vm) Local');
  await selectRunner(runnerDeps());
  assert.deepEqual(fake.configWrites.map((w) => [w.key, w.value, w.target]),
    [['nkiAgent.runnerUrl', '', 1], ['nkiAgent.verifyOnSave', 'local', 1]]);
  assert.match(fake.shown.at(-1)!.message, /^NKI Agent: saved kernels with a task now verify with the embedded simulator/);

  fake.reset();
  fake.config.set('nkiAgent.runnerUrl', 'http://trn:8765');
  fake.answers.push('$(vm) Local');
  await selectRunner(runnerDeps());
  assert.deepEqual(fake.configWrites.map((w) => [w.key, w.value]), [['nkiAgent.runnerUrl', '']]);
  assert.equal(fake.shown.at(-1)!.message,
    'NKI Agent: the runner is the embedded simulator on this machine (wrote nkiAgent.runnerUrl to your user settings (machine-scoped)).');
});

test('a command while the server is down offers Show log / Restart instead of failing silently', async () => {
  const executed: { command: string; args: unknown[] }[] = [];
  const d = deps(executed);
  let restarted = 0;
  (d as { session: unknown }).session = { state: 'crashed', connection: undefined, restartNow: async () => { restarted++; } };
  fake.activeTextEditor = { document: { languageId: 'python', uri: Uri.file('/ws/k.py') } };
  fake.answers.push('Restart');
  await verifyNow(d);
  assert.equal(restarted, 1);
  assert.match(fake.shown[0].message, /not running \(crashed\)/);
});
