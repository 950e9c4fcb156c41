// /metrics, /healthz and /readyz on the metrics port (JOBFLEET_METRICS_PORT).
// Kubernetes' readiness probe reads /readyz: false while connecting, while the
// claim store is down and while draining, so no traffic dashboard mistakes a
// paused worker for a healthy one.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';

export interface HealthServer {
  port: number;
  close(): Promise<void>;
}

export function startHealthServer(
  port: number,
  registry: Registry,
  status: () => { live: boolean; ready: boolean; reason: string },
): Promise<HealthServer> {
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/metrics') {
      registry.metrics().then(
        (body) => {
          res.writeHead(200, { 'content-type': registry.contentType });
          res.end(body);
        },
        (err: Error) => {
          res.writeHead(500);
          res.end(err.message);
        },
      );
      return;
    }
    if (path === '/healthz' || path === '/readyz') {
      const s = status();
      const ok = path === '/healthz' ? s.live : s.ready;
      res.writeHead(ok ? 200 : 503, { 'content-type': 'text/plain' });
      res.end(ok ? 'ok\n' : `${s.reason}\n`);
      return;
    }
    res.writeHead(404);
    res.end();
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, () => {
      resolve({
        port: (server.address() as AddressInfo).port,
        close: () => new Promise((r) => server.close(() => r())),
      });
    });
  });
}
