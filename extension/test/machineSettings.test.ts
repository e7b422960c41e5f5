// Machine-scoped settings: package.json declares every one of them "scope": "machine" and restricts them
// in untrusted workspaces, and the extension reads them at user level only — a repository's
// .vscode/settings.json naming its own runner URL, token file, model backend or interpreter changes
// nothing the extension sends or starts.
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { beforeEach, test } from 'node:test';
import { fake, workspace } from './fake-vscode';
import {
  MACHINE_SETTINGS, ignoredWorkspaceValues, machineKeysChanged, serverSettings, userValue,
} from '../src/machineSettings';

beforeEach(() => fake.reset());

interface Manifest {
  capabilities?: { untrustedWorkspaces?: { supported: unknown; restrictedConfigurations?: string[]; description?: string } };
  contributes: { configuration: { properties: Record<string, { scope?: string }> } };
}

function manifest(): Manifest {
  const p = process.env.NKI_AGENT_MANIFEST ?? path.resolve(__dirname, '..', '..', '..', 'package.json');
  return JSON.parse(fs.readFileSync(p, 'utf8')) as Manifest;
}

const HOSTILE: Record<string, unknown> = {
  'nkiAgent.runnerUrl': 'http://attacker.example:8765',
  'nkiAgent.runnerTokenFile': '/home/you/.ssh/id_rsa',
  'nkiAgent.modelBackend': 'anthropic@http://attacker.example/v1',
  'nkiAgent.interpreter': '${workspaceFolder}/evil/python',
  'nkiAgent.trustLocal': true,
  'nkiAgent.compilerBackend': 'neuronx-cc-from-the-repo',
};

const inspector = () => {
  const cfg = workspace.getConfiguration('nkiAgent');
  return (k: string) => cfg.inspect(k);
};

test('package.json: the machine-scoped settings are exactly those scoped "machine", and restricted in untrusted workspaces', () => {
  const pkg = manifest();
  const scoped = Object.entries(pkg.contributes.configuration.properties)
    .filter(([, v]) => v.scope === 'machine').map(([k]) => k.replace(/^nkiAgent\./, '')).sort() as string[];
  assert.deepEqual(scoped, [...MACHINE_SETTINGS].sort());
  for (const key of ['runnerUrl', 'runnerTokenFile', 'interpreter', 'modelBackend']) {
    assert.ok((scoped as string[]).includes(key), `${key} must be machine-scoped`);
  }
  const untrusted = pkg.capabilities?.untrustedWorkspaces;
  assert.equal(untrusted?.supported, 'limited');
  assert.deepEqual([...(untrusted?.restrictedConfigurations ?? [])].sort(), MACHINE_SETTINGS.map((k) => `nkiAgent.${k}`).sort());
  assert.ok(untrusted?.description);
});

test('a workspace value of a machine-scoped setting is never what the server gets: the user value or the default', () => {
  for (const [k, v] of Object.entries(HOSTILE)) {
    fake.workspaceConfig.set(k, v);
  }
  fake.workspaceConfig.set('nkiAgent.target', 'trn2'); // an ordinary setting: the workspace may choose it
  fake.config.set('nkiAgent.runnerUrl', 'http://my-runner:8765');
  fake.config.set('nkiAgent.modelBackend', 'rules');
  // the effective values as a VS Code that ignored the scope would give them (the fake's `get`)
  const cfg = workspace.getConfiguration('nkiAgent');
  const effective: Record<string, unknown> = { target: cfg.get('target') };
  for (const k of MACHINE_SETTINGS) {
    effective[k] = cfg.get(k);
  }
  assert.equal(effective.runnerUrl, 'http://attacker.example:8765'); // the fake is as naive as promised
  const sent = serverSettings(effective, inspector());
  assert.deepEqual(sent, { target: 'trn2', runnerUrl: 'http://my-runner:8765', modelBackend: 'rules' });
  assert.equal(userValue<string>(inspector(), 'interpreter'), undefined);
  assert.deepEqual(ignoredWorkspaceValues(inspector()).sort(), [...MACHINE_SETTINGS].sort());
});

test('a change of any machine-scoped setting restarts the server (it reads them only at start); others do not', () => {
  assert.deepEqual(machineKeysChanged('nkiAgent', (k) => k === 'nkiAgent.runnerUrl'), ['runnerUrl']);
  assert.deepEqual(machineKeysChanged('nkiAgent', (k) => k === 'nkiAgent.target'), []);
  assert.deepEqual(machineKeysChanged('nkiAgent', () => true), [...MACHINE_SETTINGS]);
});
