import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { LogLevel } from './fake-vscode';
import { redact, serverLine, serverLogLevel, traceFor } from '../src/log';

test('the channel level drives the LSP trace and the server log level', () => {
  assert.equal(traceFor(LogLevel.Trace as never), 'verbose');
  assert.equal(traceFor(LogLevel.Debug as never), 'messages');
  for (const l of [LogLevel.Info, LogLevel.Warning, LogLevel.Error, LogLevel.Off]) {
    assert.equal(traceFor(l as never), 'off');
  }
  assert.equal(serverLogLevel(LogLevel.Trace as never), 'DEBUG');
  assert.equal(serverLogLevel(LogLevel.Debug as never), 'INFO');
  assert.equal(serverLogLevel(LogLevel.Info as never), 'WARNING');
  assert.equal(serverLogLevel(LogLevel.Warning as never), 'WARNING');
  assert.equal(serverLogLevel(LogLevel.Error as never), 'ERROR');
});

test('redact masks every occurrence of each secret; short values are left alone', () => {
  assert.equal(redact('a tok123 b tok123', ['tok123']), 'a *** b ***');
  assert.equal(redact('abc', ['ab']), 'abc');
});

test("the server's stderr lines keep their own level", () => {
  assert.deepEqual(serverLine('2026-12-01 19:02:22,120 INFO pygls.feature_manager: Registered builtin feature exit'),
    { level: 'info', text: 'pygls.feature_manager: Registered builtin feature exit' });
  assert.deepEqual(serverLine('2026-12-01 19:02:22,120 WARNING nki_agent.server.remote: runner unreachable'),
    { level: 'warn', text: 'nki_agent.server.remote: runner unreachable' });
  assert.equal(serverLine('2026-12-01 19:02:22,120 CRITICAL x: y').level, 'error');
  assert.equal(serverLine('2026-12-01 19:02:22,120 DEBUG x: y').level, 'debug');
  assert.deepEqual(serverLine('Traceback (most recent call last):'), { level: 'error', text: 'Traceback (most recent call last):' });
});
