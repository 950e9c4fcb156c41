// The bench's own PostgreSQL database, so that server-side counters are
// ours alone (other suites on the machine use theirs), and the reading of
// those counters.
//
// Why transactions and not statements: pg_stat_statements is installed here
// but not in shared_preload_libraries, and loading it needs a server
// restart. pg_stat_database counts committed and rolled-back transactions
// per database, for every client library alike; an autocommit statement is
// one, a BEGIN … COMMIT block is one however many statements it holds.
import { randomBytes } from 'node:crypto';
import pg from 'pg';

export interface PgCounters {
  /** xact_commit + xact_rollback */
  transactions: number;
  /** tup_inserted + tup_updated + tup_deleted */
  rowsWritten: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class BenchDatabase {
  private constructor(
    readonly name: string,
    /** connection URL of the bench database */
    readonly url: string,
    /** connected to the admin database: reading the counters adds nothing to ours */
    private readonly admin: pg.Client,
  ) {}

  static async create(adminUrl: string): Promise<BenchDatabase> {
    const name = `jobfleet_bench_${randomBytes(4).toString('hex')}`;
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    await admin.query(`create database ${name}`);
    const u = new URL(adminUrl);
    u.pathname = `/${name}`;
    return new BenchDatabase(name, u.toString(), admin);
  }

  /**
   * The counters once every client session of the database has ended. A
   * backend flushes its statistics when it exits (before it leaves
   * pg_stat_activity); a live one only about once a second, so reading
   * while sessions remain would miss some.
   */
  async counters(timeoutMs = 20_000): Promise<PgCounters> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const { rows } = await this.admin.query<{ n: number }>(
        `select count(*)::int as n from pg_stat_activity
          where datname = $1 and backend_type = 'client backend'`,
        [this.name],
      );
      if (rows[0]?.n === 0) break;
      if (Date.now() > deadline)
        throw new Error(`${rows[0]?.n} sessions still open on ${this.name}`);
      await sleep(50);
    }
    await this.admin.query('select pg_stat_clear_snapshot()');
    const { rows } = await this.admin.query<{ transactions: string; rows_written: string }>(
      `select xact_commit + xact_rollback as transactions,
              tup_inserted + tup_updated + tup_deleted as rows_written
         from pg_stat_database where datname = $1`,
      [this.name],
    );
    const r = rows[0];
    if (!r) throw new Error(`no pg_stat_database row for ${this.name}`);
    return { transactions: Number(r.transactions), rowsWritten: Number(r.rows_written) };
  }

  async drop(): Promise<void> {
    try {
      await this.admin.query(`drop database if exists ${this.name} with (force)`);
    } finally {
      await this.admin.end();
    }
  }
}
