// Per-test RabbitMQ isolation: each test gets its own vhost (created and
// deleted through the management API), so queue names never collide and
// nothing is left behind.
import { randomBytes } from 'node:crypto';
import { splitAuth } from './services.js';

export class RabbitManagement {
  readonly origin: string;
  private readonly auth: string;

  constructor(mgmtUrl: string) {
    ({ origin: this.origin, auth: this.auth } = splitAuth(mgmtUrl));
  }

  async request(method: string, path: string, body?: unknown): Promise<unknown> {
    const res = await fetch(`${this.origin}/api${path}`, {
      method,
      headers: { authorization: this.auth, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    });
    if (!res.ok && !(method === 'DELETE' && res.status === 404)) {
      throw new Error(`RabbitMQ management ${method} ${path}: ${res.status} ${await res.text()}`);
    }
    const text = await res.text();
    return text ? JSON.parse(text) : undefined;
  }

  get<T = unknown>(path: string): Promise<T> {
    return this.request('GET', path) as Promise<T>;
  }
}

export interface RabbitVhost {
  vhost: string;
  /** amqp URL scoped to the vhost */
  amqpUrl: string;
  /** management URL (with credentials), for code under test that reads queue stats */
  mgmtUrl: string;
  mgmt: RabbitManagement;
  cleanup(): Promise<void>;
}

export async function createVhost(amqpUrl: string, mgmtUrl: string): Promise<RabbitVhost> {
  const mgmt = new RabbitManagement(mgmtUrl);
  const vhost = `jobfleet-test-${randomBytes(4).toString('hex')}`;
  const user = decodeURIComponent(new URL(amqpUrl).username || 'guest');
  const v = encodeURIComponent(vhost);
  await mgmt.request('PUT', `/vhosts/${v}`, {});
  await mgmt.request('PUT', `/permissions/${v}/${encodeURIComponent(user)}`, {
    configure: '.*',
    write: '.*',
    read: '.*',
  });
  const scoped = new URL(amqpUrl);
  scoped.pathname = `/${v}`;
  return {
    vhost,
    amqpUrl: scoped.toString(),
    mgmtUrl,
    mgmt,
    cleanup: async () => {
      await mgmt.request('DELETE', `/vhosts/${v}`);
    },
  };
}
