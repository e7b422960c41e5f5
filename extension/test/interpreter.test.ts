import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';
import { InterpreterSources, discoverInterpreter, expandSetting, whichOnPath } from '../src/interpreter';
import { script, tempDir } from './helpers';

function sources(over: Partial<{ setting: string; picked: string; folder: string; ext: string | Error; path: Record<string, string> }>): InterpreterSources & { asked: string[] } {
  const asked: string[] = [];
  return {
    asked,
    setting: () => { asked.push('setting'); return over.setting; },
    picked: () => { asked.push('picked'); return over.picked; },
    workspaceFolder: () => over.folder,
    pythonExtension: async () => {
      asked.push('python-extension');
      if (over.ext instanceof Error) throw over.ext;
      return over.ext;
    },
    which: async (name) => { asked.push(`which ${name}`); return over.path?.[name]; },
  };
}

test('the nkiAgent.interpreter user setting wins (with no pick for this workspace) over the Python extension and PATH', async () => {
  const src = sources({ setting: '/opt/py/bin/python3.12', ext: '/env/bin/python', path: { python3: '/usr/bin/python3' } });
  assert.deepEqual(await discoverInterpreter(src), { path: '/opt/py/bin/python3.12', source: 'setting' });
  assert.deepEqual(src.asked, ['picked', 'setting']);
});

test('a setting naming a missing file is still used, so the wrong path is reported, not skipped', async () => {
  const src = sources({ setting: '/no/such/python', path: { python3: '/usr/bin/python3' } });
  assert.deepEqual(await discoverInterpreter(src), { path: '/no/such/python', source: 'setting' });
});

test('without a setting the Python extension environment comes next', async () => {
  const src = sources({ setting: '  ', ext: '/env/bin/python', path: { python3: '/usr/bin/python3' } });
  assert.deepEqual(await discoverInterpreter(src), { path: '/env/bin/python', source: 'python-extension' });
  assert.deepEqual(src.asked, ['picked', 'setting', 'python-extension']);
});

test('without ms-python (or when its API throws) python3 on PATH is used, before python', async () => {
  for (const ext of [undefined, new Error('Python extension is not installed')]) {
    const src = sources({ ext, path: { python3: '/usr/bin/python3', python: '/usr/bin/python' } });
    assert.deepEqual(await discoverInterpreter(src), { path: '/usr/bin/python3', source: 'path' });
  }
  const onlyPython = sources({ path: { python: '/usr/local/bin/python' } });
  assert.deepEqual(await discoverInterpreter(onlyPython), { path: '/usr/local/bin/python', source: 'path' });
  assert.deepEqual(onlyPython.asked, ['picked', 'setting', 'python-extension', 'which python3', 'which python']);
});

test('nothing anywhere: no interpreter', async () => {
  assert.equal(await discoverInterpreter(sources({})), undefined);
});

test('setting expansion: ${workspaceFolder}, ~ and workspace-relative paths', () => {
  assert.equal(expandSetting('${workspaceFolder}/.venv/bin/python', '/ws', '/home/u'), '/ws/.venv/bin/python');
  assert.equal(expandSetting('~/py/bin/python', '/ws', '/home/u'), '/home/u/py/bin/python');
  assert.equal(expandSetting('${userHome}/x/python', undefined, '/home/u'), '/home/u/x/python');
  assert.equal(expandSetting('.venv/bin/python', '/ws', '/home/u'), path.resolve('/ws', '.venv/bin/python'));
  assert.equal(expandSetting('python3.12', '/ws', '/home/u'), 'python3.12'); // a bare name is looked up on PATH by spawn
});

test('whichOnPath finds executables only, in PATH order', async () => {
  const a = tempDir();
  const b = tempDir();
  fs.writeFileSync(path.join(a, 'python3'), 'not executable');
  const good = script(b, 'python3', 'exit 0');
  assert.equal(await whichOnPath('python3', { PATH: [a, b].join(path.delimiter) }), good);
  assert.equal(await whichOnPath('python3', { PATH: a }), undefined);
  assert.equal(await whichOnPath('python3', { PATH: '' }), undefined);
});

test('a "Select interpreter" choice for this workspace comes first, then the user setting, then the Python extension', async () => {
  const src = sources({ picked: '/ws/.venv/bin/python', ext: '/env/bin/python' });
  assert.deepEqual(await discoverInterpreter(src), { path: '/ws/.venv/bin/python', source: 'picked' });
  const both = sources({ setting: '/s/python', picked: '/ws/.venv/bin/python' });
  assert.deepEqual(await discoverInterpreter(both), { path: '/ws/.venv/bin/python', source: 'picked' });
  const settingOnly = sources({ setting: '/s/python', ext: '/env/bin/python' });
  assert.deepEqual(await discoverInterpreter(settingOnly), { path: '/s/python', source: 'setting' });
});
