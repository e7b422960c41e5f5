import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import * as fs from 'node:fs';

const bundle = process.env.NKI_AGENT_EXTENSION_BUNDLE;

test('the esbuild bundle loads (vscode-languageclient and all) and exports activate/deactivate',
  { skip: !bundle && 'NKI_AGENT_EXTENSION_BUNDLE not set (run through extension/run-tests.mjs)' }, () => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const mod = require(bundle!) as { activate?: unknown; deactivate?: unknown };
    assert.equal(typeof mod.activate, 'function');
    assert.equal(typeof mod.deactivate, 'function');
  });

test('the manifest contributes every command the extension registers, and main is the bundle',
  { skip: !process.env.NKI_AGENT_MANIFEST && 'NKI_AGENT_MANIFEST not set (run through extension/run-tests.mjs)' }, () => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { COMMANDS } = require('../src/ids') as { COMMANDS: Record<string, string> };
    const pkg = JSON.parse(fs.readFileSync(process.env.NKI_AGENT_MANIFEST!, 'utf8')) as {
      main: string; contributes: { commands: { command: string }[]; configuration: { properties: Record<string, unknown> } };
    };
    assert.equal(pkg.main, './extension/out/extension.js');
    const contributed = pkg.contributes.commands.map((c) => c.command).sort();
    const registered = Object.values(COMMANDS).filter((c) => c !== COMMANDS.statusMenu).sort();
    assert.deepEqual(contributed, registered);
    for (const key of ['nkiAgent.target', 'nkiAgent.runnerUrl', 'nkiAgent.modelBackend']) {
      assert.ok(key in pkg.contributes.configuration.properties, key);
    }
  });
