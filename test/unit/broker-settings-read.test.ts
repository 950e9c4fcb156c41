// The broker-settings read (src/signals/broker-settings.ts) against a fake
// management API: the four paths, a 404 for deprecated features (before
// RabbitMQ 3.13) and a 401 for feature flags (a monitoring user) read as
// none, one read per broker within readMs, and a failed read after a good one
// keeps the good one.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BrokerSettingsReader } from '../../src/signals/broker-settings.js';

let server: Server;
let url = '';
const hits: string[] = [];
let down = false;
let flagsRefused = false;
/** every read fails, the first path's last */
let failingSlowFirst = false;

beforeAll(async () => {
  server = createServer((req, res) => {
    hits.push(req.url ?? '');
    const json = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (down) return json(500, { error: 'down' });
    if (failingSlowFirst) {
      if (req.url === '/api/policies/v1') {
        setTimeout(() => json(500, { error: 'down' }), 150);
        return;
      }
      return json(500, { error: 'down' });
    }
    if (req.url === '/api/policies/v1')
      return json(200, [
        {
          vhost: 'v1',
          name: 'ttl',
          pattern: '^q$',
          'apply-to': 'queues',
          priority: 1,
          definition: { 'message-ttl': 5 },
        },
      ]);
    if (req.url === '/api/operator-policies/v1') return json(200, []);
    if (req.url === '/api/feature-flags')
      return flagsRefused
        ? json(401, { error: 'not_authorised' })
        : json(200, [{ name: 'f', state: 'disabled', stability: 'stable', desc: '' }]);
    return json(404, { error: 'Object Not Found' });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://guest:guest@127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise((r) => server.close(r)));

describe('the broker-settings read', () => {
  it('reads the four paths once per readMs; a 404 and a refused flags read are none', async () => {
    let now = 0;
    const reader = new BrokerSettingsReader(() => now);
    const first = await reader.read(url, 'v1', 60_000);
    expect(first).toEqual({
      ok: true,
      settings: {
        policies: [
          {
            name: 'ttl',
            pattern: '^q$',
            'apply-to': 'queues',
            priority: 1,
            definition: { 'message-ttl': 5 },
          },
        ],
        operatorPolicies: [],
        featureFlags: [{ name: 'f', state: 'disabled', stability: 'stable' }],
        deprecatedFeaturesUsed: [],
      },
    });
    const n = hits.length;
    now = 30_000;
    expect(await reader.read(url, 'v1', 60_000)).toEqual(first);
    expect(hits.length).toBe(n);
    flagsRefused = true;
    now = 61_000;
    const refused = await reader.read(url, 'v1', 60_000);
    expect(refused.ok && refused.settings.featureFlags).toEqual([]);
    flagsRefused = false;
  });

  it('keeps the last good read through a failure for a while, then says why', async () => {
    let now = 0;
    const reader = new BrokerSettingsReader(() => now);
    const good = await reader.read(url, 'v1', 1000);
    down = true;
    now = 2000;
    expect(await reader.read(url, 'v1', 1000)).toEqual(good);
    now = 6 * 60_000;
    const bad = await reader.read(url, 'v1', 1000);
    expect(bad).toMatchObject({ ok: false, error: expect.stringContaining('answered 500') });
    expect(JSON.stringify(bad)).not.toContain('guest:guest');
    down = false;
  });

  it('names the same failed path at every read, whichever failed first', async () => {
    failingSlowFirst = true;
    try {
      const read = await new BrokerSettingsReader().read(url, 'v1', 0);
      expect(read.ok).toBe(false);
      const error = (read as { error: string }).error;
      expect(error).toContain('policies of vhost "v1"');
      expect(error).not.toContain('operator policies');
    } finally {
      failingSlowFirst = false;
    }
  });
});
