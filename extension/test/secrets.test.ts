import * as assert from 'node:assert/strict';
import { beforeEach, test } from 'node:test';
import { fake, FakeLogChannel, FakeSecretStorage } from './fake-vscode';
import { Log } from '../src/log';
import { ANTHROPIC_KEY, RUNNER_TOKEN, Secrets, chainNeedsAnthropicKey, describeSecretEnv, serverEnv } from '../src/secrets';

const KEY = 'sk-ant-api03-abcdefghijklmnop';

beforeEach(() => fake.reset());

test('stored secrets become the server environment; a stored secret wins over an inherited one', () => {
  const env = serverEnv({ PATH: '/bin', ANTHROPIC_API_KEY: 'old' }, new Map([[ANTHROPIC_KEY, KEY], [RUNNER_TOKEN, '']]));
  assert.equal(env.ANTHROPIC_API_KEY, KEY);
  assert.equal(env.PATH, '/bin');
  assert.equal('NKI_AGENT_RUNNER_TOKEN' in env, false);
  const inherited = serverEnv({ ANTHROPIC_API_KEY: 'from-shell' }, new Map());
  assert.equal(inherited.ANTHROPIC_API_KEY, 'from-shell');
});

test('the log description names variables, never values', () => {
  const d = describeSecretEnv(new Map([[ANTHROPIC_KEY, KEY]]));
  assert.equal(d, 'ANTHROPIC_API_KEY from SecretStorage');
  assert.equal(describeSecretEnv(new Map()), 'no secrets from SecretStorage');
});

test('Set Anthropic API key: the value goes to SecretStorage only — not settings, not the log', async () => {
  const storage = new FakeSecretStorage();
  const secrets = new Secrets(storage as never);
  const changed: string[] = [];
  secrets.onDidChange((k) => changed.push(k.key));
  fake.answers.push(`  ${KEY}  `);
  assert.equal(await secrets.prompt(ANTHROPIC_KEY), true);
  assert.equal(storage.data.get('nkiAgent.anthropicApiKey'), KEY);
  assert.deepEqual(changed, ['nkiAgent.anthropicApiKey']);
  const box = fake.shown.find((s) => s.kind === 'inputBox');
  assert.equal(box?.options.password, true);
  assert.deepEqual(fake.configWrites, []);
  for (const s of fake.shown) {
    assert.ok(!s.message.includes(KEY));
  }
  const all = await secrets.all();
  assert.equal(all.get(ANTHROPIC_KEY), KEY);
  // what we log is masked even if a value slipped into a message
  const channel = new FakeLogChannel('NKI Agent');
  const log = new Log(channel as never);
  for (const v of all.values()) log.mask(v);
  log.error(`request failed with key ${KEY}`);
  assert.ok(!channel.lines.join('\n').includes(KEY));
  // an empty answer removes the secret; Escape changes nothing
  fake.answers.push('');
  await secrets.prompt(ANTHROPIC_KEY);
  assert.equal(storage.data.has('nkiAgent.anthropicApiKey'), false);
  fake.answers.push(undefined);
  assert.equal(await secrets.prompt(RUNNER_TOKEN), false);
  fake.answers.push('tok');
  await secrets.prompt(RUNNER_TOKEN); // the running server takes the token live: no restart is announced
  assert.equal(fake.shown.at(-1)!.message, 'NKI Agent: runner token saved; the running server uses it from now on.');
  await secrets.set(RUNNER_TOKEN, '');
  assert.equal(storage.data.size, 0);
});

test('which model chains need an Anthropic key', () => {
  assert.equal(chainNeedsAnthropicKey('rules'), false);
  assert.equal(chainNeedsAnthropicKey('rules,anthropic'), true);
  assert.equal(chainNeedsAnthropicKey('rules, anthropic:claude-sonnet-4-5@http://127.0.0.1:9'), true);
  assert.equal(chainNeedsAnthropicKey('openai:m@http://h/v1'), false);
  assert.equal(chainNeedsAnthropicKey('anthropicish'), false);
});
