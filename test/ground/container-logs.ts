// What the local runner keeps of a pod's output, and the kubelet API that
// serves it: `kubectl logs` asks the apiserver, which proxies
// /api/v1/namespaces/NS/pods/POD/log to the node's kubelet port,
// https://ADDRESS:PORT/containerLogs/NS/POD/CONTAINER. As the kubelet does,
// stdout and stderr are one log, line by line in the order they came, each
// line stamped with when it came (timestamps=true, sinceSeconds, sinceTime);
// tailLines, limitBytes, previous (the process before the current one) and
// follow (until the process exits or the client goes) act as on a kubelet.
//
// The log is bounded: past `maxBytes` the oldest lines go (the kubelet
// rotates its files past containerLogMaxSize), and a line longer than
// `maxLine` is cut into pieces.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { StringDecoder } from 'node:string_decoder';

export interface LogLine {
  /** when it came, ms since the epoch */
  at: number;
  text: string;
}

export class ContainerLog {
  private lines: LogLine[] = [];
  private bytes = 0;
  private readonly partial = new Map<string, { decoder: StringDecoder; text: string }>();
  private readonly followers = new Set<(line: LogLine | undefined) => void>();
  private done = false;

  constructor(
    private readonly maxBytes = 1024 * 1024,
    private readonly maxLine = 16 * 1024,
  ) {}

  /** Output of one stream (stdout, stderr): complete lines join the log, a partial one waits. */
  write(stream: string, chunk: Buffer): void {
    if (this.done) return;
    let p = this.partial.get(stream);
    if (!p) this.partial.set(stream, (p = { decoder: new StringDecoder('utf8'), text: '' }));
    p.text += p.decoder.write(chunk);
    let nl: number;
    while ((nl = p.text.indexOf('\n')) >= 0) {
      this.add(p.text.slice(0, nl));
      p.text = p.text.slice(nl + 1);
    }
    while (p.text.length > this.maxLine) {
      this.add(p.text.slice(0, this.maxLine));
      p.text = p.text.slice(this.maxLine);
    }
  }

  /** The process has exited: what waited for a newline is a line, and followers stop. */
  end(): void {
    if (this.done) return;
    for (const p of this.partial.values()) {
      const rest = p.text + p.decoder.end();
      if (rest) this.add(rest);
    }
    this.done = true;
    for (const f of this.followers) f(undefined);
    this.followers.clear();
  }

  get ended(): boolean {
    return this.done;
  }

  private add(text: string): void {
    const line = { at: Date.now(), text };
    this.lines.push(line);
    this.bytes += Buffer.byteLength(text) + 1;
    if (this.bytes > this.maxBytes) {
      let drop = 0;
      while (this.bytes > this.maxBytes && drop < this.lines.length)
        this.bytes -= Buffer.byteLength(this.lines[drop++]!.text) + 1;
      this.lines = this.lines.slice(drop);
    }
    for (const f of this.followers) f(line);
  }

  /** The lines kept, from `sinceMs` on, the last `tail` of them. */
  select(o: { sinceMs?: number; tail?: number } = {}): LogLine[] {
    let out = o.sinceMs === undefined ? this.lines : this.lines.filter((l) => l.at >= o.sinceMs!);
    if (o.tail !== undefined) out = o.tail > 0 ? out.slice(-o.tail) : [];
    return out;
  }

  /** Calls `f` with each new line, then with undefined when the process exits; returns the unsubscribe. */
  follow(f: (line: LogLine | undefined) => void): () => void {
    if (this.done) {
      f(undefined);
      return () => undefined;
    }
    this.followers.add(f);
    return () => this.followers.delete(f);
  }
}

/** What a node has for one container of a pod: its log, or why there is none (HTTP status and words). */
export type LogLookup = (
  namespace: string,
  pod: string,
  container: string,
  previous: boolean,
) => ContainerLog | { status: number; message: string };

/** RFC 3339 with nanoseconds, as the kubelet stamps each line (Date has milliseconds). */
function stamp(ms: number): string {
  return new Date(ms).toISOString().replace(/Z$/, '000000Z');
}

/** Serves GET /containerLogs/NS/POD/CONTAINER as the kubelet does; anything else is a 404 saying what is served. */
export function serveContainerLogs(
  req: IncomingMessage,
  res: ServerResponse,
  lookup: LogLookup,
): void {
  const url = new URL(req.url ?? '/', 'https://node');
  const m = /^\/containerLogs\/([^/]+)\/([^/]+)\/([^/]+)\/?$/.exec(url.pathname);
  const fail = (status: number, message: string) => {
    res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8' });
    res.end(message);
  };
  if (req.method !== 'GET' || !m)
    return fail(
      404,
      `this node (the dev ground's local runner) serves container logs only; exec, attach and port-forward need a real kubelet (make dev NODE=real)`,
    );
  const q = url.searchParams;
  const flag = (name: string) => q.get(name) === 'true' || q.get(name) === '1';
  const number = (name: string) => (q.has(name) ? Number(q.get(name)) : undefined);
  const [ns, pod, container] = m.slice(1).map(decodeURIComponent) as [string, string, string];
  const log = lookup(ns, pod, container, flag('previous'));
  if (!(log instanceof ContainerLog)) return fail(log.status, log.message);

  const sinceSeconds = number('sinceSeconds');
  const sinceTime = q.get('sinceTime');
  const sinceMs =
    sinceSeconds !== undefined
      ? Date.now() - sinceSeconds * 1000
      : sinceTime
        ? Date.parse(sinceTime)
        : undefined;
  const timestamps = flag('timestamps');
  let room = number('limitBytes') ?? Infinity;
  res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
  /** false once limitBytes is reached (the response then ends) */
  const send = (l: LogLine): boolean => {
    const text = Buffer.from(`${timestamps ? `${stamp(l.at)} ` : ''}${l.text}\n`);
    const piece = text.length > room ? text.subarray(0, room) : text;
    res.write(piece);
    room -= piece.length;
    return room > 0;
  };
  for (const l of log.select({ sinceMs, tail: number('tailLines') })) {
    if (!send(l)) return void res.end();
  }
  if (!flag('follow') || log.ended) return void res.end();
  const stop = log.follow((l) => {
    if (l && send(l)) return;
    stop();
    res.end();
  });
  res.once('close', stop);
}
