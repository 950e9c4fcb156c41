// Several broker addresses in one JOBFLEET_BROKER_URL: a RabbitMQ cluster's
// nodes as a comma-separated list of amqp(s):// URLs, each with its own
// credentials (the Secret's one key holds them all). The worker connects to
// one; when it loses it, it tries the next, as the Java and .NET clients do
// with an address list. Pure.

/** The URLs in a JOBFLEET_BROKER_URL value, in order. */
export function brokerUrls(value: string): string[] {
  return value
    .split(',')
    .map((u) => u.trim())
    .filter(Boolean);
}

/** The host:port of each URL, for logs (never the credentials). */
export function brokerHost(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}:${u.port || (u.protocol === 'amqps:' ? 5671 : 5672)}`;
  } catch {
    return 'an unparsable URL';
  }
}

/** Connects to the first of the URLs that answers (a cluster's nodes in order); else the last error. */
export async function connectAny<T>(
  value: string,
  connect: (url: string) => Promise<T>,
): Promise<T> {
  let last: unknown = new Error('no broker URL given');
  for (const url of brokerUrls(value)) {
    try {
      return await connect(url);
    } catch (err) {
      last = err;
    }
  }
  throw last;
}

/**
 * A 15 s AMQP heartbeat unless the URL sets one: a node that vanishes without
 * a reset (its host cut off) is noticed within two beats and the next node
 * tried, not after the server's 60 s proposal.
 */
export function withHeartbeat(url: string): string {
  const u = new URL(url);
  if (!u.searchParams.has('heartbeat')) u.searchParams.set('heartbeat', '15');
  return u.toString();
}
