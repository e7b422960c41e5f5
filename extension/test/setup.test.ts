import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { setupProblem } from '../src/setup';

const SETTING = { path: '/bad/python', source: 'setting' as const };
const PATHPY = { path: '/usr/bin/python3', source: 'path' as const };

test('each bad setup has one message and a way out', () => {
  assert.equal(setupProblem(PATHPY, { kind: 'ok', executable: 'x', version: '3.11.0', packageVersion: '0.1.0' }), undefined);
  const none = setupProblem(undefined, undefined)!;
  assert.match(none.message, /Python 3\.11 or newer/);
  assert.deepEqual(none.actions, ['select', 'showLog']);
  const wrong = setupProblem(SETTING, { kind: 'missing', detail: 'spawn /bad/python ENOENT' })!;
  assert.match(wrong.message, /nkiAgent\.interpreter setting does not exist.*\/bad\/python/);
  assert.deepEqual(wrong.actions, ['select', 'showLog']);
  const old = setupProblem(PATHPY, { kind: 'too-old', executable: '/usr/bin/python3', version: '3.9.2' })!;
  assert.match(old.message, /needs Python 3\.11 or newer; \/usr\/bin\/python3 \(from PATH\) is Python 3\.9\.2/);
  const bare = setupProblem(PATHPY, { kind: 'no-package', executable: 'x', version: '3.12.1', detail: 'No module named nki_agent' })!;
  assert.match(bare.message, /not installed in \/usr\/bin\/python3/);
  assert.deepEqual(bare.actions, ['install', 'select', 'showLog']);
  const shim = setupProblem(PATHPY, { kind: 'failed', detail: 'line1\nasdf: No version is set for python' })!;
  assert.match(shim.message, /did not run as Python: asdf: No version is set/);
});
