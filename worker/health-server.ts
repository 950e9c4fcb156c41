// /metrics, /healthz and /readyz on the metrics port (JOBFLEET_METRICS_PORT).
// Kubernetes' readiness probe reads /readyz's status code: 503 while
// connecting, while the claim store is down and while draining. Its body says
// why, as JSON (./readiness.ts), for the operator to put on the JobWorker.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import type { Readiness } from './readiness.js';

export interface HealthServer {
  port: number;
  close(): Promise<void>;
}

export function startHealthServer(
  port: number,
  host: string | undefined,
  registry: Registry,
  readiness: () => Readiness,
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
    if (path === '/healthz') {
      // Alive while it answers: a worker waiting for its broker is not stuck.
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end('ok\n');
      return;
    }
    if (path === '/readyz') {
      const r = readiness();
      res.writeHead(r.ready ? 200 : 503, { 'content-type': 'application/json' });
      res.end(`${JSON.stringify(r)}\n`);
      return;
    }
    res.writeHead(404);
    res.end();
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      resolve({
        port: (server.address() as AddressInfo).port,
        // A probe or scraper holding a keep-alive connection must not keep
        // the process alive: close() alone waits for every open connection.
        close: () =>
          new Promise((r) => {
            server.close(() => r());
            server.closeAllConnections();
          }),
      });
    });
  });
}
