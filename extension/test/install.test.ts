import * as assert from 'node:assert/strict';
import * as path from 'node:path';
import { beforeEach, test } from 'node:test';
import { fake, FakeLogChannel } from './fake-vscode';
import { installServer, installSource, pipArgs, pipFailure } from '../src/install';
import { Log } from '../src/log';
import { script, tempDir } from './helpers';

beforeEach(() => fake.reset());

test('install source: the checkout, else the bundled wheel, else the package index', () => {
  assert.equal(installSource('/repo', (p) => p === '/repo/pyproject.toml'), '/repo');
  const wheels = path.join('/ext', 'extension', 'wheels');
  assert.equal(installSource('/ext', () => false, (d) => (d === wheels ? ['README', 'nki_agent-0.1.0-py3-none-any.whl'] : [])),
    path.join(wheels, 'nki_agent-0.1.0-py3-none-any.whl'));
  assert.equal(installSource('/ext', () => false, () => []), 'nki-agent');
  assert.deepEqual(pipArgs('x.whl'), ['-m', 'pip', 'install', '--disable-pip-version-check', '--no-input', 'x.whl']);
});

test('pip failures in one line', () => {
  assert.match(pipFailure('error: externally-managed-environment\n× This environment is externally managed', 1), /PEP 668/);
  assert.match(pipFailure('/usr/bin/python3: No module named pip', 1), /no pip/);
  assert.equal(pipFailure('Collecting x\nERROR: Could not find a version that satisfies nki-agent', 1),
    'ERROR: Could not find a version that satisfies nki-agent');
  assert.equal(pipFailure('', 2), 'pip exited with code 2');
});

test('installServer runs pip in the interpreter with progress and the output in the log', async () => {
  const dir = tempDir();
  const ok = script(dir, 'python', 'echo "args: $*"; echo "Successfully installed nki-agent-0.1.0"');
  const channel = new FakeLogChannel('NKI Agent');
  assert.deepEqual(await installServer(ok, '/w/nki_agent.whl', new Log(channel as never)), { ok: true });
  assert.ok(fake.progress[0].startsWith(`begin Installing NKI Agent into ${ok}`));
  assert.ok(fake.progress.includes('Successfully installed nki-agent-0.1.0'));
  assert.ok(channel.lines.some((l) => l.includes('args: -m pip install --disable-pip-version-check --no-input /w/nki_agent.whl')));
  const bad = script(dir, 'python-pep668', 'echo "error: externally-managed-environment" >&2; exit 1');
  const r = await installServer(bad, 'nki-agent', new Log(channel as never));
  assert.equal(r.ok, false);
  assert.match((r as { message: string }).message, /PEP 668/);
  const missing = await installServer(path.join(dir, 'nope'), 'nki-agent', new Log(channel as never));
  assert.equal(missing.ok, false);
});
