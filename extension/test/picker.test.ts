import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { beforeEach, test } from 'node:test';
import { fake, Uri } from './fake-vscode';
import { PICKED_KEY, candidates, storeInterpreter } from '../src/interpreterPicker';
import { script, tempDir } from './helpers';

beforeEach(() => fake.reset());

function memento() {
  const data = new Map<string, string>();
  return { data, get: (k: string) => data.get(k), update: async (k: string, v: string | undefined) => { if (v === undefined) data.delete(k); else data.set(k, v); } };
}

test('the choice is kept in the workspace state, never written to a settings file (the setting is machine-scoped)', async () => {
  fake.workspaceFolders = [{ uri: Uri.file('/ws') }];
  const state = memento();
  state.data.set(PICKED_KEY, '/old');
  assert.equal(await storeInterpreter('/ws/.venv/bin/python', state), 'state');
  assert.deepEqual(fake.configWrites, []);
  assert.equal(state.data.get(PICKED_KEY), '/ws/.venv/bin/python');
  assert.equal(await storeInterpreter('', state), 'state');
  assert.equal(state.data.has(PICKED_KEY), false);
});

test('an unregistered setting makes no difference: the choice is kept in the workspace state', async () => {
  fake.unregistered.add('nkiAgent.interpreter');
  const state = memento();
  assert.equal(await storeInterpreter('/ws/.venv/bin/python', state), 'state');
  assert.equal(state.data.get(PICKED_KEY), '/ws/.venv/bin/python');
  assert.equal(await storeInterpreter('', state), 'state');
  assert.equal(state.data.has(PICKED_KEY), false);
});

test('candidates: workspace virtual environments first, then PATH, no duplicates', async () => {
  const ws = tempDir();
  fs.mkdirSync(path.join(ws, '.venv', 'bin'), { recursive: true });
  const venvPy = script(path.join(ws, '.venv', 'bin'), 'python', 'exit 0');
  const bin = tempDir();
  const py3 = script(bin, 'python3', 'exit 0');
  assert.deepEqual(await candidates([ws], { PATH: bin }), [venvPy, py3]);
  assert.deepEqual(await candidates([ws], { PATH: path.join(ws, '.venv', 'bin') }), [venvPy]);
});
