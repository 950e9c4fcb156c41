// The claims pool's TLS options from the URL and a mounted CA file
// (JOBFLEET_TLS_CA_FILE): pg lets a URL's sslmode replace the whole `ssl`
// option, so a verify-full URL once dropped the CA and every connection to a
// server signed by a private CA failed. (On real servers:
// test/integration/private-ca.test.ts and worker-tls.test.ts.)
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { poolConfig } from '../../worker/claim-store.js';

const dir = mkdtempSync(path.join(tmpdir(), 'jobfleet-ca-unit-'));
const caFile = path.join(dir, 'ca.crt');
writeFileSync(caFile, '-----BEGIN CERTIFICATE-----\nnot checked here\n-----END CERTIFICATE-----\n');
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** What pg itself makes of the config: the options a connection is opened with. */
function sslOf(config: pg.PoolConfig): unknown {
  const client = new pg.Client(config) as unknown as { connectionParameters: { ssl: unknown } };
  return client.connectionParameters.ssl;
}

describe('the claims pool over TLS with a mounted CA', () => {
  it('keeps the CA and checks the host name under sslmode=verify-full', () => {
    const ssl = sslOf(poolConfig('postgres://u@db.internal/claims?sslmode=verify-full', caFile));
    expect(ssl).toMatchObject({ ca: expect.stringContaining('not checked here') });
    expect(ssl).not.toHaveProperty('checkServerIdentity');
    expect(ssl).not.toHaveProperty('rejectUnauthorized', false);
  });

  it('checks the CA only under require and verify-ca, as libpq does with a root certificate', () => {
    for (const mode of ['require', 'verify-ca']) {
      const ssl = sslOf(poolConfig(`postgres://u@db.internal/claims?sslmode=${mode}`, caFile));
      expect(ssl, mode).toMatchObject({
        ca: expect.stringContaining('not checked here'),
        checkServerIdentity: expect.any(Function),
      });
      expect(ssl).not.toHaveProperty('rejectUnauthorized', false);
    }
  });

  it('uses TLS with the CA when the URL names no mode, and none under sslmode=disable', () => {
    expect(sslOf(poolConfig('postgres://u@db.internal/claims', caFile))).toMatchObject({
      ca: expect.stringContaining('not checked here'),
    });
    expect(sslOf(poolConfig('postgres://u@db.internal/claims?sslmode=disable', caFile))).toBe(
      false,
    );
  });

  it('leaves the URL to pg when no CA file is mounted', () => {
    const url = 'postgres://u@db.internal/claims?sslmode=verify-full&application_name=w';
    expect(poolConfig(url)).toMatchObject({ connectionString: url });
    expect(poolConfig(url)).not.toHaveProperty('ssl');
  });
});
