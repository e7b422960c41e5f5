import * as assert from 'node:assert/strict';
import * as http from 'node:http';
import { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { Fetch, healthUrl, probeRunner } from '../src/runner';

const reply = (status: number, body: unknown): Fetch => async () => ({ ok: status < 300, status, json: async () => body });

test('runner state from /healthz', async () => {
  assert.deepEqual(await probeRunner(''), { kind: 'local' });
  assert.equal(healthUrl('http://h:1/'), 'http://h:1/healthz');
  assert.deepEqual(await probeRunner('http://h:1', reply(200, { ok: true, backend: 'simulator' })),
    { kind: 'remote', url: 'http://h:1', backend: 'simulator' });
  assert.deepEqual(await probeRunner('http://h:1', reply(503, {})), { kind: 'unreachable', url: 'http://h:1', reason: 'HTTP 503' });
  assert.equal((await probeRunner('http://h:1', reply(200, { hello: 1 }))).kind, 'unreachable');
  assert.equal((await probeRunner('ftp://h', reply(200, { ok: true }))).kind, 'unreachable');
  const refused: Fetch = async () => { throw Object.assign(new TypeError('fetch failed'), { cause: { code: 'ECONNREFUSED' } }); };
  assert.deepEqual(await probeRunner('http://h:1', refused), { kind: 'unreachable', url: 'http://h:1', reason: 'ECONNREFUSED' });
  const multi: Fetch = async () => {
    throw Object.assign(new TypeError('fetch failed'), { cause: Object.assign(new AggregateError([Object.assign(new Error('a'), { code: 'ECONNREFUSED' })]), {}) });
  };
  assert.deepEqual(await probeRunner('http://localhost:1', multi), { kind: 'unreachable', url: 'http://localhost:1', reason: 'ECONNREFUSED' });
  const hang: Fetch = (_u, init) => new Promise((_, rej) => init.signal.addEventListener('abort', () => rej(new Error('aborted'))));
  assert.deepEqual(await probeRunner('http://h:1', hang, 50), { kind: 'unreachable', url: 'http://h:1', reason: 'no answer in 0.05 s' });
});

test('a real HTTP runner on 127.0.0.1, then the same port closed', async () => {
  const server = http.createServer((req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(req.url === '/healthz' ? JSON.stringify({ ok: true, backend: 'simulator' }) : '{}');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  assert.deepEqual(await probeRunner(url), { kind: 'remote', url, backend: 'simulator' });
  await new Promise((r) => server.close(r));
  const down = await probeRunner(url);
  assert.deepEqual(down, { kind: 'unreachable', url, reason: 'ECONNREFUSED' });
});
