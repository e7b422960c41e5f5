import * as assert from 'node:assert/strict';
import { beforeEach, test } from 'node:test';
import { fake, FakeLogChannel, LogLevel } from './fake-vscode';
import { CrashPolicy } from '../src/crashPolicy';
import { Interpreter } from '../src/interpreter';
import { Log } from '../src/log';
import { ProbeResult } from '../src/probe';
import { RUNNER_TOKEN, ANTHROPIC_KEY, SecretKind } from '../src/secrets';
import { ConnectionHooks, CrashChoice, LaunchSpec, ServerConnection, Session } from '../src/session';
import { SetupProblem } from '../src/setup';
import { ServerState } from '../src/statusBar';
import { FakeClock, settle } from './helpers';

const TOKEN = 'runner-token-7f3a9c1e';
const KEY = 'sk-ant-api03-secret-key-value';
const OK: ProbeResult = { kind: 'ok', executable: '/v/bin/python', version: '3.11.9', packageVersion: '0.1.0' };

class FakeConn implements ServerConnection {
  started = false;
  stopped = false;
  level: unknown;
  constructor(readonly spec: LaunchSpec, readonly hooks: ConnectionHooks, private readonly failStart: boolean) {}
  async start(): Promise<void> {
    if (this.failStart) {
      this.hooks.onErrorLine('Fatal: simulated start-up crash');
      throw new Error('Pending response rejected since connection got disposed');
    }
    this.started = true;
  }
  async stop(): Promise<void> { this.stopped = true; }
  async executeCommand(): Promise<unknown> { return undefined; }
  async sendRequest(): Promise<unknown> { return undefined; }
  notified: { method: string; params: unknown }[] = [];
  failNotify = false;
  async sendNotification(method: string, params: unknown): Promise<void> {
    if (this.failNotify) {
      throw new Error('connection is closed');
    }
    this.notified.push({ method, params });
  }
  setLogLevel(l: unknown): void { this.level = l; }
}

interface Rig {
  session: Session;
  conns: FakeConn[];
  clock: FakeClock;
  states: ServerState[];
  problems: SetupProblem[];
  crashMessages: number[];
  channel: FakeLogChannel;
  /** Presses a button of the pending crash message. */
  answerCrash: { press?: (c: CrashChoice) => void };
  level: { value: LogLevel };
  lastErrors: (string | undefined)[];
}

function rig(opts: { interp?: Interpreter | null; probe?: ProbeResult; failStart?: () => boolean; secrets?: Map<SecretKind, string>;
  baseEnv?: NodeJS.ProcessEnv } = {}): Rig {
  const clock = new FakeClock();
  const conns: FakeConn[] = [];
  const states: ServerState[] = [];
  const problems: SetupProblem[] = [];
  const crashMessages: number[] = [];
  const channel = new FakeLogChannel('NKI Agent');
  const answerCrash: Rig['answerCrash'] = {};
  const level = { value: LogLevel.Info };
  const lastErrors: (string | undefined)[] = [];
  const interp = opts.interp === null ? undefined : opts.interp ?? { path: '/v/bin/python', source: 'setting' as const };
  const session = new Session({
    log: new Log(channel as never),
    connect: (spec, hooks) => {
      const c = new FakeConn(spec, hooks, opts.failStart?.() ?? false);
      conns.push(c);
      return c;
    },
    discover: async () => interp,
    probe: async () => opts.probe ?? OK,
    secrets: async () => opts.secrets ?? new Map(),
    baseEnv: opts.baseEnv ?? { PATH: '/usr/bin', HOME: '/home/u' },
    cwd: '/storage',
    logLevel: () => level.value as never,
    onState: (s) => states.push(s),
    ui: {
      setupProblem: (p) => problems.push(p),
      crashLoop: (n, lastError) => { crashMessages.push(n); lastErrors.push(lastError); return new Promise<CrashChoice>((res) => { answerCrash.press = res; }); },
      showLog: () => undefined,
    },
    policy: new CrashPolicy(5, 180_000, () => clock.now),
    timers: clock,
    restartDelayMs: 1000,
  });
  return { session, conns, clock, states, problems, crashMessages, channel, answerCrash, level, lastErrors };
}

/** Lets restarts run: time forward in steps, promises settled after each. */
async function run(r: Rig, ms: number, step = 500): Promise<void> {
  for (let t = 0; t < ms; t += step) {
    await settle();
    r.clock.advance(step);
  }
  await settle();
}

beforeEach(() => fake.reset());

test('start: python -m nki_agent.server with the log level, in the extension folder, secrets only in the env', async () => {
  const r = rig({ secrets: new Map([[RUNNER_TOKEN, TOKEN], [ANTHROPIC_KEY, KEY]]) });
  await r.session.start();
  assert.equal(r.conns.length, 1);
  const spec = r.conns[0].spec;
  assert.equal(spec.command, '/v/bin/python');
  assert.deepEqual(spec.args, ['-m', 'nki_agent.server', '--log-level', 'WARNING']);
  assert.equal(spec.cwd, '/storage');
  assert.equal(spec.env.NKI_AGENT_RUNNER_TOKEN, TOKEN);
  assert.equal(spec.env.ANTHROPIC_API_KEY, KEY);
  assert.equal(spec.env.PATH, '/usr/bin');
  assert.equal(r.session.state, 'running');
  assert.deepEqual(r.states, ['starting', 'running']);
  const log = r.channel.lines.join('\n');
  assert.ok(log.includes('NKI_AGENT_RUNNER_TOKEN, ANTHROPIC_API_KEY from SecretStorage'), log);
  assert.ok(!log.includes(TOKEN) && !log.includes(KEY), log);
  assert.deepEqual(fake.configWrites, []); // nothing went to settings
});

test('a server that dies at every start: 5 attempts, ONE crash message, then no more restarts', async () => {
  const r = rig({ failStart: () => true });
  await r.session.start();
  await run(r, 60_000);
  assert.equal(r.conns.length, 5);
  assert.deepEqual(r.crashMessages, [5]);
  assert.deepEqual(r.lastErrors, ['Fatal: simulated start-up crash']);
  assert.equal(r.session.state, 'crashed');
  await run(r, 600_000); // nothing else happens, however long we wait
  assert.equal(r.conns.length, 5);
  assert.equal(r.crashMessages.length, 1);
  assert.equal(r.clock.count, 0);
});

test('after the crash message, Restart starts again and counts afresh', async () => {
  let fail = true;
  const r = rig({ failStart: () => fail });
  await r.session.start();
  await run(r, 30_000);
  assert.equal(r.crashMessages.length, 1);
  r.answerCrash.press!('restart'); // still broken: another round of 5, then a second message
  await run(r, 30_000);
  assert.equal(r.conns.length, 10);
  assert.equal(r.crashMessages.length, 2);
  fail = false; // the user fixed the interpreter, then pressed Restart
  r.answerCrash.press!('restart');
  await run(r, 2_000);
  assert.equal(r.conns.length, 11);
  assert.equal(r.session.state, 'running');
  assert.equal(r.crashMessages.length, 2);
});

test('a crash while running is restarted after the debounce delay', async () => {
  const r = rig();
  await r.session.start();
  r.conns[0].hooks.onClosed('the server process exited');
  r.conns[0].hooks.onClosed('the server process exited'); // the same death reported twice counts once
  assert.equal(r.session.state, 'starting');
  await settle();
  assert.equal(r.conns.length, 1);
  await run(r, 1_500);
  assert.equal(r.conns.length, 2);
  assert.equal(r.session.state, 'running');
  assert.equal(r.crashMessages.length, 0);
});

test('a burst of restart requests is one restart; a stopped connection closing is not a crash', async () => {
  const r = rig();
  await r.session.start();
  r.session.requestRestart('nkiAgent.interpreter changed');
  r.session.requestRestart('runner token changed');
  r.session.requestRestart('nkiAgent.interpreter changed');
  await run(r, 3_000);
  assert.equal(r.conns.length, 2);
  assert.equal(r.conns[0].stopped, true);
  r.conns[0].hooks.onClosed('exit after stop');
  await run(r, 3_000);
  assert.equal(r.conns.length, 2);
  assert.equal(r.session.state, 'running');
  assert.ok(r.channel.lines.some((l) => l.includes('nkiAgent.interpreter changed, runner token changed')), r.channel.lines.join('\n'));
});

test('an interpreter without the package: the install message, no server start', async () => {
  const r = rig({ probe: { kind: 'no-package', executable: '/usr/bin/python3', version: '3.12.3', detail: "No module named 'nki_agent'" } });
  await r.session.start();
  assert.equal(r.conns.length, 0);
  assert.equal(r.session.state, 'needs-setup');
  assert.equal(r.problems.length, 1);
  assert.deepEqual(r.problems[0].actions, ['install', 'select', 'showLog']);
});

test('no interpreter at all: one message with Select interpreter', async () => {
  const r = rig({ interp: null });
  await r.session.start();
  assert.equal(r.conns.length, 0);
  assert.equal(r.problems.length, 1);
  assert.match(r.problems[0].message, /found none/);
  assert.ok(r.problems[0].actions.includes('select'));
});

test('dispose stops the server and cancels pending restarts', async () => {
  const r = rig();
  await r.session.start();
  r.session.requestRestart('x');
  await r.session.dispose();
  await run(r, 5_000);
  assert.equal(r.conns.length, 1);
  assert.equal(r.conns[0].stopped, true);
  assert.equal(r.session.state, 'stopped');
});

test('the log level: the trace follows at once; a new server log level restarts the server once', async () => {
  const r = rig();
  await r.session.start();
  assert.equal(r.conns[0].level, LogLevel.Info);
  r.level.value = LogLevel.Warning; // same server level (WARNING): trace only
  r.session.setLogLevel(LogLevel.Warning as never);
  await run(r, 3_000);
  assert.equal(r.conns.length, 1);
  assert.equal(r.conns[0].level, LogLevel.Warning);
  r.level.value = LogLevel.Trace;
  r.session.setLogLevel(LogLevel.Trace as never);
  await run(r, 3_000);
  assert.equal(r.conns.length, 2);
  assert.deepEqual(r.conns[1].spec.args.slice(-2), ['--log-level', 'DEBUG']);
});

test('a new runner token reaches the running server in nki/runnerToken, without a restart; never in the log', async () => {
  const secrets = new Map<SecretKind, string>();
  const r = rig({ secrets, baseEnv: { PATH: '/usr/bin', NKI_AGENT_RUNNER_TOKEN: 'from-shell' } });
  await r.session.start();
  secrets.set(RUNNER_TOKEN, TOKEN);
  await r.session.secretChanged(RUNNER_TOKEN);
  secrets.delete(RUNNER_TOKEN); // removed: the server falls back to what its environment had at start
  await r.session.secretChanged(RUNNER_TOKEN);
  await run(r, 5000);
  assert.equal(r.conns.length, 1);
  assert.equal(r.conns[0].stopped, false);
  assert.deepEqual(r.conns[0].notified, [{ method: 'nki/runnerToken', params: { value: TOKEN } },
    { method: 'nki/runnerToken', params: { value: 'from-shell' } }]);
  const log = r.channel.lines.join('\n');
  assert.ok(log.includes('runner token given to the running server (NKI_AGENT_RUNNER_TOKEN; no restart)'), log);
  assert.ok(!log.includes(TOKEN), log);
});

test('a secret the server cannot take live, a token while the server is down, or a failed notification: one restart', async () => {
  const secrets = new Map<SecretKind, string>([[ANTHROPIC_KEY, KEY]]);
  const r = rig({ secrets });
  await r.session.start();
  await r.session.secretChanged(ANTHROPIC_KEY);
  await run(r, 3000);
  assert.equal(r.conns.length, 2);
  assert.equal(r.conns[1].spec.env.ANTHROPIC_API_KEY, KEY);
  r.conns[1].failNotify = true;
  await r.session.secretChanged(RUNNER_TOKEN);
  await run(r, 3000);
  assert.equal(r.conns.length, 3);
  await r.session.dispose();
  await r.session.secretChanged(RUNNER_TOKEN); // disposed: nothing starts
  await run(r, 3000);
  assert.equal(r.conns.length, 3);
});
