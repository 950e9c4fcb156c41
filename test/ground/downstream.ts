// A non-idempotent downstream for the in-doubt suites: a booking service
// that performs every call it receives (no idempotency key is read), counts
// them per reference, and answers lookups by reference, as a carrier's
// booking API, an SMTP relay or a legacy ERP would. Faults are the test's:
// before or after it performs a booking it can refuse, fail, hang or reset
// the connection, and it reports each booking (and each checkpoint a handler
// announces) as it happens, so that a test can SIGKILL or SIGSTOP the worker
// at that point. Nothing in src/ or worker/ knows of it.
import { EventEmitter, once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Booking {
  id: number;
  ref: string;
  /** what the caller asked for (compared by reconciles: a conflict is another booking under the ref) */
  details: unknown;
  at: number;
}

/** After the booking is performed: answer it, fail with 500, reset the connection, or never answer. */
export type AfterEffect = 'answer' | 'fail' | 'reset' | 'hang';

export interface Downstream {
  url: string;
  /** 'booked' (booking) right after a booking is performed, before it is answered; 'checkpoint' (ref, at) */
  events: EventEmitter;
  /** bookings performed under `ref` (every call counts: this downstream dedupes nothing) */
  calls(ref: string): number;
  /** every booking performed, in order */
  bookings(): Booking[];
  /** the next booking under a ref starting with `prefix` meets this after it is performed (once) */
  afterNext(prefix: string, what: AfterEffect): void;
  /** lookups (GET) answer 503 while true: the downstream cannot tell */
  lookupsDown: boolean;
  /** a booking is answered this long after it is performed (a slow carrier): the window a kill hits */
  answerDelayMs: number;
  /** resolves on the next 'booked' whose ref starts with `prefix` */
  nextBooking(prefix: string): Promise<Booking>;
  /** resolves on the next checkpoint `at` of a ref starting with `prefix` */
  nextCheckpoint(prefix: string, at: string): Promise<void>;
  close(): Promise<void>;
}

export async function startDownstream(host = '127.0.0.1'): Promise<Downstream> {
  const events = new EventEmitter();
  const bookings: Booking[] = [];
  const after = new Map<string, AfterEffect>();
  const hung = new Set<http.ServerResponse>();
  let nextId = 1;
  const d = { lookupsDown: false, answerDelayMs: 0 };

  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://downstream');
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      const send = (status: number, value: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(value));
      };
      if (req.method === 'GET' && url.pathname === '/bookings') {
        if (d.lookupsDown) return send(503, { error: 'lookups unavailable' });
        const ref = url.searchParams.get('ref') ?? '';
        return send(
          200,
          bookings.filter((b) => b.ref === ref),
        );
      }
      if (req.method === 'POST' && url.pathname === '/checkpoint') {
        const { ref, at } = JSON.parse(body) as { ref: string; at: string };
        send(204, null);
        events.emit('checkpoint', ref, at);
        return;
      }
      if (req.method === 'POST' && url.pathname === '/bookings') {
        const { ref, details } = JSON.parse(body) as { ref: string; details?: unknown };
        const booking: Booking = { id: nextId++, ref, details: details ?? null, at: Date.now() };
        bookings.push(booking);
        const prefix = [...after.keys()].find((p) => ref.startsWith(p));
        const what = prefix === undefined ? 'answer' : (after.get(prefix) as AfterEffect);
        if (prefix !== undefined) after.delete(prefix);
        events.emit('booked', booking);
        switch (what) {
          case 'answer':
            if (d.answerDelayMs > 0)
              return void setTimeout(() => send(201, booking), d.answerDelayMs);
            return send(201, booking);
          case 'fail':
            return send(500, { error: 'failed after booking' });
          case 'reset':
            return req.socket.resetAndDestroy();
          case 'hang':
            hung.add(res);
            return;
        }
      }
      send(404, { error: 'no such route' });
    });
  });
  server.listen(0, host);
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://${host}:${port}`,
    events,
    calls: (ref) => bookings.filter((b) => b.ref === ref).length,
    bookings: () => [...bookings],
    afterNext: (prefix, what) => after.set(prefix, what),
    get lookupsDown() {
      return d.lookupsDown;
    },
    set lookupsDown(v: boolean) {
      d.lookupsDown = v;
    },
    get answerDelayMs() {
      return d.answerDelayMs;
    },
    set answerDelayMs(v: number) {
      d.answerDelayMs = v;
    },
    nextBooking: (prefix) =>
      new Promise((resolve) => {
        const on = (b: Booking) => {
          if (!b.ref.startsWith(prefix)) return;
          events.off('booked', on);
          resolve(b);
        };
        events.on('booked', on);
      }),
    nextCheckpoint: (prefix, at) =>
      new Promise((resolve) => {
        const on = (ref: string, where: string) => {
          if (!ref.startsWith(prefix) || where !== at) return;
          events.off('checkpoint', on);
          resolve();
        };
        events.on('checkpoint', on);
      }),
    close: async () => {
      for (const r of hung) r.destroy();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
