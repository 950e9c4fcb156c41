// Finds the test ground's RabbitMQ and PostgreSQL: the URLs in the
// JOBFLEET_TEST_* variables, else the local services, else (when a Docker
// engine answers) containers started with testcontainers. A service that
// cannot be found is reported with how to start it; suites that need it then
// fail. They never skip.
import net from 'node:net';
import pg from 'pg';

export interface ServiceUrls {
  amqpUrl: string;
  rabbitMgmtUrl: string;
  pgUrl: string;
}

/** A missing service: which one and what a person should do about it. */
export type Missing = Partial<Record<'rabbitmq' | 'postgres' | 'kube', string>>;

export function configuredUrls(env: NodeJS.ProcessEnv = process.env): ServiceUrls {
  return {
    amqpUrl: env.JOBFLEET_TEST_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672',
    rabbitMgmtUrl: env.JOBFLEET_TEST_RABBIT_MGMT_URL ?? 'http://guest:guest@127.0.0.1:15672',
    pgUrl: env.JOBFLEET_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
  };
}

function tcpReachable(url: string, timeoutMs = 2000): Promise<boolean> {
  const u = new URL(url);
  const port = Number(u.port || { 'amqp:': 5672, 'http:': 80, 'postgres:': 5432 }[u.protocol]);
  return new Promise((resolve) => {
    const socket = net.connect({ host: u.hostname, port, timeout: timeoutMs });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
    socket.once('timeout', () => done(false));
  });
}

export async function rabbitProblem(
  urls: Pick<ServiceUrls, 'amqpUrl' | 'rabbitMgmtUrl'>,
): Promise<string | undefined> {
  if (!(await tcpReachable(urls.amqpUrl))) {
    return `RabbitMQ is not reachable at ${redact(urls.amqpUrl)}: start it (rabbitmq-server -detached) or set JOBFLEET_TEST_AMQP_URL`;
  }
  try {
    const { origin, auth } = splitAuth(urls.rabbitMgmtUrl);
    const res = await fetch(`${origin}/api/overview`, {
      headers: { authorization: auth },
      signal: AbortSignal.timeout(5000),
    });
    if (!res.ok) return `RabbitMQ management API answered ${res.status} at ${origin}/api/overview`;
  } catch {
    return `RabbitMQ management API is not reachable at ${redact(urls.rabbitMgmtUrl)}: run rabbitmq-plugins enable rabbitmq_management, or set JOBFLEET_TEST_RABBIT_MGMT_URL`;
  }
  return undefined;
}

async function postgresProblem(urls: ServiceUrls): Promise<string | undefined> {
  const client = new pg.Client({ connectionString: urls.pgUrl, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query('select 1');
    return undefined;
  } catch (err) {
    return `PostgreSQL is not reachable at ${redact(urls.pgUrl)} (${(err as Error).message}): start it (pg_ctlcluster <version> main start) or set JOBFLEET_TEST_PG_URL`;
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function dockerAvailable(): Promise<boolean> {
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await getContainerRuntimeClient();
    return true;
  } catch {
    return false;
  }
}

export interface FoundServices {
  urls: ServiceUrls;
  missing: Missing;
  stop(): Promise<void>;
}

/** Probes each service; starts a container for one that is missing when Docker is present. */
export async function findServices(
  env: NodeJS.ProcessEnv = process.env,
  opts: { containers?: boolean } = {},
): Promise<FoundServices> {
  const urls = configuredUrls(env);
  const missing: Missing = {};
  const stops: Array<() => Promise<unknown>> = [];
  const [rabbit, postgres] = await Promise.all([rabbitProblem(urls), postgresProblem(urls)]);
  const docker = (rabbit || postgres) && opts.containers !== false && (await dockerAvailable());

  if (rabbit && docker) {
    const { RabbitMQContainer } = await import('@testcontainers/rabbitmq');
    const c = await new RabbitMQContainer('rabbitmq:3.13-management').start();
    urls.amqpUrl = c.getAmqpUrl();
    urls.rabbitMgmtUrl = `http://guest:guest@${c.getHost()}:${c.getMappedPort(15672)}`;
    stops.push(() => c.stop());
  } else if (rabbit) {
    missing.rabbitmq = rabbit;
  }
  if (postgres && docker) {
    const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
    const c = await new PostgreSqlContainer('postgres:16').start();
    urls.pgUrl = c.getConnectionUri();
    stops.push(() => c.stop());
  } else if (postgres) {
    missing.postgres = postgres;
  }
  return {
    urls,
    missing,
    stop: async () => {
      await Promise.all(stops.map((s) => s()));
    },
  };
}

/** fetch() does not take credentials in the URL: split them into a header. */
export function splitAuth(url: string): { origin: string; auth: string } {
  const u = new URL(url);
  const auth =
    'Basic ' +
    Buffer.from(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`).toString(
      'base64',
    );
  u.username = '';
  u.password = '';
  return { origin: u.toString().replace(/\/$/, ''), auth };
}

export function redact(url: string): string {
  const u = new URL(url);
  if (u.password) u.password = '***';
  return u.toString();
}
