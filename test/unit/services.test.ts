// How the test ground reports a missing service: by name, with how to start it.
import { describe, expect, it } from 'vitest';
import { configuredUrls, findServices, redact, splitAuth } from '../ground/services.js';
import { freePort } from '../ground/control-plane.js';

describe('test ground service discovery', () => {
  it('reads the JOBFLEET_TEST_* overrides and falls back to the local services', () => {
    expect(configuredUrls({}).amqpUrl).toBe('amqp://guest:guest@127.0.0.1:5672');
    expect(configuredUrls({ JOBFLEET_TEST_PG_URL: 'postgres://x@db:5433/t' }).pgUrl).toBe(
      'postgres://x@db:5433/t',
    );
  });

  it('names RabbitMQ and PostgreSQL, and how to start them, when nothing answers', async () => {
    const [a, p] = await Promise.all([freePort(), freePort()]);
    const found = await findServices(
      {
        JOBFLEET_TEST_AMQP_URL: `amqp://guest:guest@127.0.0.1:${a}`,
        JOBFLEET_TEST_PG_URL: `postgres://postgres@127.0.0.1:${p}/test`,
      },
      { containers: false },
    );
    expect(found.missing.rabbitmq).toMatch(/RabbitMQ is not reachable.*rabbitmq-server -detached/);
    expect(found.missing.postgres).toMatch(/PostgreSQL is not reachable.*pg_ctlcluster/);
  });

  it('never prints passwords', () => {
    expect(redact('amqp://user:s3cret@host:5672/v')).toBe('amqp://user:***@host:5672/v');
    const { origin, auth } = splitAuth('http://guest:pa%40ss@h:15672');
    expect(origin).toBe('http://h:15672');
    expect(Buffer.from(auth.replace('Basic ', ''), 'base64').toString()).toBe('guest:pa@ss');
  });
});
