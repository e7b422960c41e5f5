// Unit tests of the extension: compiles src/ and test/ (tsconfig.test.json) plus the esbuild bundle
// into a private folder, then runs them with node's built-in test runner, `vscode` mapped to
// test/fake-vscode.ts. Usage: node extension/run-tests.mjs [--out DIR] [extra node --test flags]
import { spawnSync, execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const ext = dirname(fileURLToPath(import.meta.url));
const root = dirname(ext);
const argv = process.argv.slice(2);
const outIdx = argv.indexOf('--out');
const out = outIdx >= 0 ? argv.splice(outIdx, 2)[1] : mkdtempSync(join(tmpdir(), 'nki-ext-tests-'));
const temporary = outIdx < 0;

try {
  execFileSync(join(root, 'node_modules', '.bin', 'tsc'), ['-p', join(ext, 'tsconfig.test.json'), '--outDir', out],
    { stdio: 'inherit' });
  const bundle = join(out, 'bundle', 'extension.js');
  await esbuild.build({ entryPoints: [join(ext, 'src', 'extension.ts')], outfile: bundle, bundle: true, platform: 'node',
    format: 'cjs', target: 'node20', external: ['vscode'], logLevel: 'warning' });
  const testDir = join(out, 'test');
  const files = readdirSync(testDir).filter((f) => f.endsWith('.test.js')).sort().map((f) => join(testDir, f));
  const r = spawnSync(process.execPath, ['--require', join(testDir, 'setup.js'), '--test', '--test-reporter=tap', ...argv, ...files],
    { stdio: 'inherit', env: { ...process.env, NKI_AGENT_EXTENSION_BUNDLE: bundle, NKI_AGENT_MANIFEST: join(root, 'package.json') } });
  process.exitCode = r.status ?? 1;
} finally {
  if (temporary) {
    rmSync(out, { recursive: true, force: true });
  }
}
