// Build of the VS Code extension: type-check (tsc --noEmit), bundle src/extension.ts with esbuild into
// out/extension.js (the manifest's main; `vscode` stays external), and with --package also the
// server wheel (extension/wheels inside the .vsix, for "Install NKI Agent into this interpreter") and the .vsix in dist/.
// Usage: node extension/build.mjs [--package] [--python PY]
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const ext = dirname(fileURLToPath(import.meta.url));
const root = dirname(ext);
const bin = (name) => join(root, 'node_modules', '.bin', name);
const args = process.argv.slice(2);
const pyIdx = args.indexOf('--python');
const python = pyIdx >= 0 ? args[pyIdx + 1] : process.env.PYTHON || 'python3';

const t0 = Date.now();
execFileSync(bin('tsc'), ['-p', ext, '--noEmit'], { stdio: 'inherit' });
await esbuild.build({
  entryPoints: [join(ext, 'src', 'extension.ts')],
  outfile: join(ext, 'out', 'extension.js'),
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node20',
  external: ['vscode'],
  minify: true,
  sourcemap: false,
  logLevel: 'warning',
});
console.log(`extension/out/extension.js built in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

if (args.includes('--package')) {
  const version = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version;
  const out = join(root, 'dist', `nki-agent-${version}.vsix`);
  // vsce packs a folder: stage only what the .vsix holds (walking the repository would take seconds)
  const stage = mkdtempSync(join(tmpdir(), 'nki-agent-vsix-'));
  try {
    const wheels = join(stage, 'extension', 'wheels');
    mkdirSync(join(stage, 'extension', 'out'), { recursive: true });
    mkdirSync(wheels, { recursive: true });
    execFileSync(python, ['-m', 'pip', 'wheel', '--quiet', '--no-deps',
      '--disable-pip-version-check', '-w', wheels, root], { stdio: ['ignore', 'inherit', 'pipe'], cwd: root });
    const wheel = readdirSync(wheels).find((f) => f.endsWith('.whl'));
    if (!wheel) {
      throw new Error('no server wheel was built');
    }
    copyFileSync(join(root, 'package.json'), join(stage, 'package.json'));
    copyFileSync(join(ext, 'README.md'), join(stage, 'README.md'));
    copyFileSync(join(ext, 'out', 'extension.js'), join(stage, 'extension', 'out', 'extension.js'));
    mkdirSync(join(root, 'dist'), { recursive: true });
    execFileSync(bin('vsce'), ['package', '--no-dependencies', '--allow-missing-repository', '--skip-license', '-o', out],
      { stdio: 'inherit', cwd: stage });
    console.log(`${out} (with the server wheel ${wheel}) in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
  if (!existsSync(out)) {
    throw new Error(`vsce did not write ${out}`);
  }
}
