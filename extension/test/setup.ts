// Loaded with `node --require` before the tests: `require('vscode')` resolves to the fake module.
/* eslint-disable @typescript-eslint/no-require-imports */
import * as path from 'path';
const Module = require('module') as { _resolveFilename: (req: string, ...rest: unknown[]) => string };
const original = Module._resolveFilename;
const fakePath = path.join(__dirname, 'fake-vscode.js');
Module._resolveFilename = function (request: string, ...rest: unknown[]): string {
  return request === 'vscode' ? fakePath : original.call(this, request, ...rest);
};
