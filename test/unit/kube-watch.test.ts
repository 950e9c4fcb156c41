// KubeClient.watch against a peer that stops talking: a watch whose connection
// died without a FIN or RST must end (and be reopened by the informer), not
// hang forever with the cache silently going stale. And what the informer
// keeps of an object.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { Informer } from '../../src/controller/informer.js';
import { KubeClient } from '../../src/kube/client.js';

let server: http.Server | undefined;
afterEach(() => new Promise<void>((r) => (server ? server.close(() => r()) : r())));

/** An apiserver stand-in that sends one event, then nothing, never closing. */
async function stalling(): Promise<KubeClient> {
  server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.write(
      `${JSON.stringify({ type: 'ADDED', object: { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'a', resourceVersion: '1' } } })}\n`,
    );
  });
  return clientOf(server);
}

/** A KubeClient of the stand-in `srv`, once it listens. */
async function clientOf(srv: http.Server): Promise<KubeClient> {
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address() as AddressInfo;
  return new KubeClient({
    getCurrentCluster: () => ({ server: `http://127.0.0.1:${port}` }),
    getCurrentContext: () => 'test',
    getContextObject: () => null,
    applyToHTTPSOptions: () => Promise.resolve(),
  });
}

describe('KubeClient.watch', () => {
  it('fails a watch that stays silent past its timeoutSeconds, after delivering what came', async () => {
    const client = await stalling();
    const seen: string[] = [];
    const started = Date.now();
    await expect(
      client.watch(
        '/api/v1/pods',
        { timeoutSeconds: '1' },
        (type, obj) => seen.push(`${type} ${obj.metadata.name}`),
        new AbortController().signal,
      ),
    ).rejects.toThrow(/no data past its timeout/);
    expect(seen).toEqual(['ADDED a']);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it('ends quietly when its signal aborts', async () => {
    const client = await stalling();
    const abort = new AbortController();
    const watching = client.watch('/api/v1/pods', {}, () => abort.abort(), abort.signal);
    await expect(watching).resolves.toBeUndefined();
  });
});

describe('Informer cache', () => {
  it("keeps the spec's and metadata's field managers and drops the status writers' ('status')", async () => {
    const managedFields = [
      { manager: 'kubectl', operation: 'Apply', fieldsV1: { 'f:spec': { 'f:paused': {} } } },
      {
        manager: 'jobfleet-operator',
        operation: 'Apply',
        subresource: 'status',
        fieldsV1: { 'f:status': { 'f:conditions': {} } },
      },
    ];
    server = http.createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      if (req.url?.includes('watch=')) return; // a watch that stays open, silent
      res.end(
        JSON.stringify({
          metadata: { resourceVersion: '5' },
          items: [
            { metadata: { name: 'w', namespace: 'ns', resourceVersion: '4', managedFields } },
          ],
        }),
      );
    });
    const client = await clientOf(server);
    const informer = (drop: 'all' | 'status') =>
      new Informer(client, {
        apiVersion: 'jobfleet.dev/v1alpha1',
        kind: 'JobWorker',
        namespace: 'ns',
        resyncMs: 60_000,
        dropManagedFields: drop,
        onChange: () => undefined,
        log: pino({ level: 'silent' }),
      });
    for (const [drop, kept] of [
      ['status', ['kubectl']],
      ['all', undefined],
    ] as const) {
      const i = informer(drop);
      await i.start();
      i.stop();
      const fields = i.cache.get('ns/w')?.metadata.managedFields as
        Array<{ manager: string }> | undefined;
      expect(fields?.map((f) => f.manager)).toEqual(kept);
    }
    server.closeAllConnections();
  });

  it('indexes objects by their JobWorker label, per namespace, and forgets one deleted', async () => {
    const pod = (namespace: string, name: string, jobworker: string) => ({
      metadata: {
        name,
        namespace,
        resourceVersion: '1',
        labels: { 'jobfleet.dev/jobworker': jobworker },
      },
    });
    server = http.createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      if (!req.url?.includes('watch=')) {
        res.end(
          JSON.stringify({
            metadata: { resourceVersion: '5' },
            items: [
              pod('a', 'p1', 'w'),
              pod('b', 'p2', 'w'),
              pod('a', 'p3', 'other'),
              pod('a', 'p4', 'w'),
            ],
          }),
        );
        return;
      }
      // then p1 goes, and the watch stays open
      res.write(
        `${JSON.stringify({ type: 'DELETED', object: { ...pod('a', 'p1', 'w'), kind: 'Pod' } })}\n`,
      );
    });
    const client = await clientOf(server);
    let deleted: (gone: string | undefined) => void = () => undefined;
    const gone = new Promise<string | undefined>((r) => (deleted = r));
    const informer = new Informer(client, {
      apiVersion: 'v1',
      kind: 'Pod',
      resyncMs: 60_000,
      indexLabel: 'jobfleet.dev/jobworker',
      onChange: (_key, obj, was) => {
        if (!obj) deleted(was?.metadata.name);
      },
      log: pino({ level: 'silent' }),
    });
    await informer.start();
    const names = (ns: string, jw: string) =>
      informer
        .byLabel(ns, jw)
        .map((p) => p.metadata.name)
        .sort();
    try {
      // the list, before the watch's deletion may have come
      expect(names('b', 'w')).toEqual(['p2']);
      expect(names('a', 'other')).toEqual(['p3']);
      expect(await gone).toBe('p1');
      expect(names('a', 'w')).toEqual(['p4']);
    } finally {
      informer.stop();
      server.closeAllConnections();
    }
  });
});
