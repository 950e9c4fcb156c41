// Per-test PostgreSQL isolation: a fresh schema, named in the connection's
// search_path, dropped afterwards.
import { randomBytes } from 'node:crypto';
import pg from 'pg';

export interface PgSchema {
  schema: string;
  /** connection URL whose sessions use the schema by default */
  url: string;
  pool: pg.Pool;
  cleanup(): Promise<void>;
}

export async function createSchema(pgUrl: string): Promise<PgSchema> {
  const schema = `jobfleet_test_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: pgUrl });
  await admin.connect();
  try {
    await admin.query(`create schema ${schema}`);
  } finally {
    await admin.end();
  }
  const u = new URL(pgUrl);
  // %20, not the form encoding's "+": libpq (psql, as the docs use it) reads only the former
  u.searchParams.delete('options');
  u.search = `${u.search ? `${u.search}&` : '?'}options=${encodeURIComponent(`-c search_path=${schema}`)}`;
  const url = u.toString();
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  return {
    schema,
    url,
    pool,
    cleanup: async () => {
      await pool.end();
      const c = new pg.Client({ connectionString: pgUrl });
      await c.connect();
      try {
        await c.query(`drop schema if exists ${schema} cascade`);
      } finally {
        await c.end();
      }
    },
  };
}
