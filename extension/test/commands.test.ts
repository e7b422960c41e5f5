import * as assert from 'node:assert/strict';
import { beforeEach, test } from 'node:test';
import { fake, FakeSecretStorage, Position, Range, Uri } from './fake-vscode';
import { CommandDeps, decideFix, diagnosticCode, diagnosticsFor, fixKernel, missingAnthropicKey, selectTarget, showKernelReport, validRunnerUrl, verifyNow } from '../src/commands';
import { ANTHROPIC_KEY, Secrets } from '../src/secrets';
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

test('Select target writes nkiAgent.target (workspace scope with a folder open)', async () => {
  fake.workspaceFolders = [{ uri: Uri.file('/ws') }];
  fake.answers.push('trn2');
  await selectTarget();
  assert.deepEqual(fake.configWrites, [{ key: 'nkiAgent.target', value: 'trn2', target: 2 }]);
  assert.deepEqual(fake.shown[0].items, ['auto', 'trn1', 'trn2', 'trn3']);
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
