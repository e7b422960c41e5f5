import * as assert from 'node:assert/strict';
import * as path from 'node:path';
import { test } from 'node:test';
import { PROBE_MARKER, parseProbe, probeInterpreter } from '../src/probe';
import { script, tempDir } from './helpers';

const ans = (o: unknown) => ({ stdout: `${PROBE_MARKER}${JSON.stringify(o)}\n`, stderr: '', exitCode: 0 });

test('parse: a good interpreter', () => {
  assert.deepEqual(parseProbe(ans({ executable: '/v/bin/python', version: [3, 11, 9], package: '0.1.0' })),
    { kind: 'ok', executable: '/v/bin/python', version: '3.11.9', packageVersion: '0.1.0' });
});

test('parse: version below 3.11 is too old, whatever the package says', () => {
  assert.equal(parseProbe(ans({ executable: '/usr/bin/python3', version: [3, 10, 12] })).kind, 'too-old');
  assert.equal(parseProbe(ans({ executable: '/usr/bin/python', version: [2, 7, 18] })).kind, 'too-old');
  assert.equal(parseProbe(ans({ executable: 'x', version: [4, 0, 0], package: '1' })).kind, 'ok');
});

test('parse: a Python without the package, or with a broken install', () => {
  const r = parseProbe(ans({ executable: '/usr/bin/python3', version: [3, 12, 3], error: "ModuleNotFoundError: No module named 'nki_agent'" }));
  assert.deepEqual(r, { kind: 'no-package', executable: '/usr/bin/python3', version: '3.12.3', detail: "ModuleNotFoundError: No module named 'nki_agent'" });
  const partial = parseProbe(ans({ executable: 'p', version: [3, 11, 0], package: '0.1.0', error: 'missing modules: pygls' }));
  assert.equal(partial.kind, 'no-package');
});

test('parse: cannot start, garbage, timeouts and shims that fail', () => {
  assert.equal(parseProbe({ stdout: '', stderr: '', exitCode: null, errorCode: 'ENOENT', errorMessage: 'spawn /x ENOENT' }).kind, 'missing');
  assert.equal(parseProbe({ stdout: '', stderr: '', exitCode: null, errorCode: 'EACCES' }).kind, 'missing');
  assert.equal(parseProbe({ stdout: '', stderr: '', exitCode: null, errorCode: 'ETIMEDOUT' }).kind, 'failed');
  const shim = parseProbe({ stdout: '', stderr: 'No preset version installed for command python3\n', exitCode: 126 });
  assert.deepEqual(shim, { kind: 'failed', detail: 'No preset version installed for command python3' });
  assert.equal(parseProbe({ stdout: `${PROBE_MARKER}{not json`, stderr: '', exitCode: 0 }).kind, 'failed');
  assert.equal(parseProbe(ans({ version: ['x'] })).kind, 'failed');
  // noise before the answer (a sitecustomize that prints) is fine
  const noisy = ans({ executable: 'p', version: [3, 13, 1], package: '0.1.0' });
  assert.equal(parseProbe({ ...noisy, stdout: 'hello from sitecustomize\n' + noisy.stdout }).kind, 'ok');
});

test('probe runs real processes: a missing path, an old Python, a failing shim', async () => {
  const dir = tempDir();
  assert.equal((await probeInterpreter(path.join(dir, 'nope'))).kind, 'missing');
  const old = script(dir, 'python-old', `echo '${PROBE_MARKER}{"executable": "/old", "version": [3, 8, 10]}'`);
  assert.deepEqual(await probeInterpreter(old), { kind: 'too-old', executable: '/old', version: '3.8.10' });
  const shim = script(dir, 'python-shim', 'echo "pyenv: python3: command not found" >&2; exit 127');
  assert.deepEqual(await probeInterpreter(shim), { kind: 'failed', detail: 'pyenv: python3: command not found' });
});

test('the probe script runs on a real Python', { skip: !process.env.NKI_AGENT_TEST_PYTHON && 'NKI_AGENT_TEST_PYTHON not set' }, async () => {
  // the project's venv has nki_agent: the probe must say ok (this is what the extension checks before starting)
  const r = await probeInterpreter(process.env.NKI_AGENT_TEST_PYTHON!);
  assert.equal(r.kind, 'ok', JSON.stringify(r));
});

test('the probe script on a Python without the package says no-package', { skip: !process.env.NKI_AGENT_TEST_BARE_PYTHON && 'NKI_AGENT_TEST_BARE_PYTHON not set' }, async () => {
  const r = await probeInterpreter(process.env.NKI_AGENT_TEST_BARE_PYTHON!, { cwd: tempDir(), env: { PATH: process.env.PATH } });
  assert.ok(r.kind === 'no-package' || r.kind === 'too-old', JSON.stringify(r));
});
