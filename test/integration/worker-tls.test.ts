// TLS to the claim store with a CA bundle from a mounted file
// (JOBFLEET_TLS_CA_FILE). The test ground's PostgreSQL serves TLS with its own
// certificate (Debian's snakeoil, CN=localhost); that certificate file is the CA.
import { existsSync } from 'node:fs';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { poolConfig } from '../../worker/claim-store.js';
import { harness, type Harness } from './worker-harness.js';

let h: Harness;
let caFile: string;
beforeEach(async () => {
  h = await harness();
  const { rows } = await h.db.pool.query<{ ssl: string; ssl_cert_file: string }>(
    `select current_setting('ssl') as ssl, current_setting('ssl_cert_file') as ssl_cert_file`,
  );
  if (rows[0]?.ssl !== 'on' || !existsSync(rows[0].ssl_cert_file)) {
    throw new Error(
      'this suite needs the test PostgreSQL to serve TLS with a certificate file readable here (ssl = on)',
    );
  }
  caFile = rows[0].ssl_cert_file;
});
afterEach(async () => {
  await h?.cleanup();
});

const overTls = (url: string) => {
  const u = new URL(url);
  u.hostname = 'localhost'; // the certificate's name
  u.searchParams.set('application_name', 'jobfleet-tls-test');
  return u.toString();
};

describe('claim store over TLS', () => {
  it('a worker given the CA file verifies the server and runs jobs over TLS', async () => {
    const w = await h.startWorker({ config: { claimsUrl: overTls(h.db.url), tlsCaFile: caFile } });
    const { key } = await h.job('tls-1');
    await h.waitOutcomes(w, 1);
    expect(w.outcomes).toEqual(['completed']);
    expect(await h.claim(key)).toMatchObject({ state: 'completed' });
    const { rows } = await h.db.pool.query<{ ssl: boolean }>(
      `select s.ssl from pg_stat_ssl s join pg_stat_activity a using (pid) where a.application_name = 'jobfleet-tls-test'`,
    );
    expect(rows.length).toBeGreaterThan(0);
    expect(rows.every((r) => r.ssl)).toBe(true);
  });

  it('refuses a server whose certificate the CA bundle does not vouch for', async () => {
    const pool = new pg.Pool(poolConfig(overTls(h.db.url), '/etc/ssl/certs/ca-certificates.crt'));
    await expect(pool.query('select 1')).rejects.toThrow(
      /self[- ]signed|unable to verify|certificate/i,
    );
    await pool.end();
  });
});
