// A loopback TCP proxy a test can cut and restore: a real network partition
// between one client and a real service, without touching the service other
// tests share.
import net from 'node:net';

export interface TcpProxy {
  port: number;
  /** refuse new connections and reset open ones */
  cut(): void;
  /** a hung peer: connections stay open, nothing is forwarded either way, new ones are held unanswered */
  hang(): void;
  /** requests still reach the service, its answers are held (a confirm or a reply that never comes back) */
  holdReplies(): void;
  restore(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(
  targetHost: string,
  targetPort: number,
  listenHost = '127.0.0.1',
): Promise<TcpProxy> {
  let up = true;
  let hung = false;
  let holding = false;
  const sockets = new Set<net.Socket>();
  const pairs = new Set<[net.Socket, net.Socket]>();
  const held = new Set<net.Socket>();
  const server = net.createServer((client) => {
    if (!up) {
      client.resetAndDestroy();
      return;
    }
    if (hung) {
      held.add(client);
      client.on('error', () => held.delete(client)).on('close', () => held.delete(client));
      client.pause();
      return;
    }
    const upstream = net.connect(targetPort, targetHost);
    sockets.add(client).add(upstream);
    const pair: [net.Socket, net.Socket] = [client, upstream];
    pairs.add(pair);
    const drop = () => {
      pairs.delete(pair);
      sockets.delete(client);
      sockets.delete(upstream);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((r) => server.listen(0, listenHost, r));
  const cut = () => {
    up = false;
    for (const s of [...sockets, ...held]) s.resetAndDestroy();
    sockets.clear();
    held.clear();
  };
  return {
    port: (server.address() as net.AddressInfo).port,
    cut,
    hang() {
      hung = true;
      for (const [client, upstream] of pairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
      }
    },
    holdReplies() {
      holding = true;
      for (const [client, upstream] of pairs) {
        upstream.unpipe(client);
        upstream.pause();
      }
    },
    restore() {
      up = true;
      if (holding) {
        holding = false;
        for (const [client, upstream] of pairs) upstream.pipe(client);
      }
      if (hung) {
        hung = false;
        for (const [client, upstream] of pairs) client.pipe(upstream).pipe(client);
        for (const s of held) s.resetAndDestroy();
        held.clear();
      }
    },
    close() {
      cut();
      return new Promise((r) => server.close(() => r()));
    },
  };
}

/** The same URL, pointed at the proxy. */
export function viaProxy(url: string, proxy: TcpProxy): string {
  const u = new URL(url);
  u.hostname = '127.0.0.1';
  u.port = String(proxy.port);
  return u.toString();
}
