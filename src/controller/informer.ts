// List + watch one kind into a cache, calling `onChange(key)` for every
// change and, every `resyncMs`, for every cached key (missed events are a
// known failure of watch-driven operators). Watch errors reconnect with
// backoff from the last resourceVersion; 410 Gone relists. resourceVersions
// are passed back to the server as given, never compared.
import type { Logger } from 'pino';
import { KubeApiError, resourcePath, type KubeClient, type KubeObject } from '../kube/client.js';

export interface InformerOptions {
  apiVersion: string;
  kind: string;
  /** all namespaces when undefined */
  namespace?: string;
  labelSelector?: string;
  resyncMs: number;
  /**
   * `obj` undefined: deleted, and `gone` is the object as last seen; `old`,
   * on a change the watch or a relist brought, is the object it replaced
   */
  onChange(key: string, obj: KubeObject | undefined, gone?: KubeObject, old?: KubeObject): void;
  log: Logger;
  /** each watch opened after the first (a timeout, an error, a 410): jobfleet_watch_restarts_total */
  onWatchRestart?: () => void;
  /**
   * Drop metadata.managedFields before caching: often the largest part of an
   * object, times every cached object (controller-runtime's
   * TransformStripManagedFields). 'all' when nothing reads who set a field of
   * this kind; 'status' keeps the entries of spec and metadata (who paused,
   * who allowed a change) and drops the status writers', which list every
   * status field.
   */
  dropManagedFields?: 'all' | 'status';
  /** index the cache by this label's value (`byLabel`): a JobWorker's pods or records without a scan */
  indexLabel?: string;
  /** keep only what is read of each object (pods: most of a pod is never read here) */
  slim?: (obj: KubeObject) => KubeObject;
}

export const keyOf = (o: { metadata: { namespace?: string; name: string } }) =>
  o.metadata.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : o.metadata.name;

export class Informer {
  readonly cache = new Map<string, KubeObject>();
  /** namespace/indexLabel's value → the keys of the objects that carry it */
  private readonly index = new Map<string, Set<string>>();
  private resourceVersion = '';
  private abort: AbortController | undefined;
  private resync: NodeJS.Timeout | undefined;
  private stopped = false;
  private failures = 0;

  constructor(
    private readonly client: KubeClient,
    private readonly opts: InformerOptions,
  ) {}

  /** Resolves once the first list has filled the cache (retrying: a new CRD's storage may still be initializing). */
  async start(): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      if (this.stopped) return;
      try {
        await this.relist();
        break;
      } catch (err) {
        const ms = Math.min(30_000, 250 * 2 ** Math.min(attempt, 8));
        this.opts.log.warn({ kind: this.opts.kind, err, retryInMs: ms }, 'list failed; retrying');
        await new Promise((r) => setTimeout(r, ms));
      }
    }
    void this.watch();
    this.resync = setInterval(() => {
      for (const [key, obj] of this.cache) this.opts.onChange(key, obj);
    }, this.opts.resyncMs);
    this.resync.unref();
  }

  get kind(): string {
    return this.opts.kind;
  }

  /** The cached objects of `namespace` whose `indexLabel` is `value`. */
  byLabel(namespace: string, value: string): KubeObject[] {
    return [...(this.index.get(`${namespace}/${value}`) ?? [])].flatMap(
      (k) => this.cache.get(k) ?? [],
    );
  }

  stop(): void {
    this.stopped = true;
    if (this.resync) clearInterval(this.resync);
    this.abort?.abort();
  }

  /** As kept in the cache: lists and watch events omit apiVersion/kind on items. */
  private cached(item: KubeObject): KubeObject {
    const obj = { ...item, apiVersion: this.opts.apiVersion, kind: this.opts.kind };
    const drop = this.opts.dropManagedFields;
    if (drop && obj.metadata.managedFields) {
      obj.metadata = { ...obj.metadata };
      if (drop === 'all') delete obj.metadata.managedFields;
      else
        obj.metadata.managedFields = (
          obj.metadata.managedFields as Array<{ subresource?: string }>
        ).filter((f) => f.subresource !== 'status');
    }
    return this.opts.slim ? this.opts.slim(obj) : obj;
  }

  private put(key: string, obj: KubeObject): void {
    this.remove(key);
    this.cache.set(key, obj);
    const value = this.indexOf(obj);
    if (!value) return;
    const keys = this.index.get(value) ?? new Set<string>();
    this.index.set(value, keys.add(key));
  }

  private remove(key: string): void {
    const old = this.cache.get(key);
    this.cache.delete(key);
    const value = old && this.indexOf(old);
    if (!value) return;
    const keys = this.index.get(value);
    keys?.delete(key);
    if (keys?.size === 0) this.index.delete(value);
  }

  private indexOf(obj: KubeObject): string | undefined {
    const value = this.opts.indexLabel && obj.metadata.labels?.[this.opts.indexLabel];
    return value ? `${obj.metadata.namespace ?? ''}/${value}` : undefined;
  }

  private query(): Record<string, string> {
    return this.opts.labelSelector ? { labelSelector: this.opts.labelSelector } : {};
  }

  private async relist(): Promise<void> {
    const list = await this.client.list(
      this.opts.apiVersion,
      this.opts.kind,
      this.opts.namespace,
      this.query(),
    );
    const seen = new Set<string>();
    for (const item of list.items) {
      const obj = this.cached(item);
      const key = keyOf(obj);
      seen.add(key);
      const old = this.cache.get(key);
      this.put(key, obj);
      if (!old || old.metadata.resourceVersion !== obj.metadata.resourceVersion)
        this.opts.onChange(key, obj, undefined, old);
    }
    for (const key of [...this.cache.keys()]) {
      if (!seen.has(key)) {
        const gone = this.cache.get(key);
        this.remove(key);
        this.opts.onChange(key, undefined, gone);
      }
    }
    this.resourceVersion = list.metadata.resourceVersion;
  }

  private async watch(): Promise<void> {
    for (let opened = 0; !this.stopped; opened++) {
      if (opened > 0) this.opts.onWatchRestart?.();
      let gone = false;
      try {
        const abort = (this.abort = new AbortController());
        if (this.stopped) abort.abort();
        const path = resourcePath(this.opts.apiVersion, this.opts.kind, this.opts.namespace);
        let failed: Error | undefined;
        await this.client.watch(
          path,
          {
            ...this.query(),
            resourceVersion: this.resourceVersion,
            allowWatchBookmarks: 'true',
            // The server ends each watch after 5–10 minutes (as client-go asks), so
            // a connection that died silently is noticed (see KubeClient.watch).
            timeoutSeconds: String(300 + Math.floor(Math.random() * 300)),
          },
          (type, obj) => {
            if (failed) return;
            this.failures = 0;
            if (type === 'ERROR') {
              if (obj.code === 410) gone = true;
              failed = new Error(`watch error ${obj.code ?? ''}`);
              abort.abort();
              return;
            }
            if (obj.metadata?.resourceVersion) this.resourceVersion = obj.metadata.resourceVersion;
            if (type === 'BOOKMARK') return;
            const full = this.cached(obj);
            const key = keyOf(full);
            if (type === 'DELETED') {
              this.remove(key);
              this.opts.onChange(key, undefined, full);
            } else {
              const old = this.cache.get(key);
              this.put(key, full);
              this.opts.onChange(key, full, undefined, old);
            }
          },
          abort.signal,
        );
        if (failed) throw failed;
      } catch (err) {
        if (this.stopped) return;
        if (gone || (err instanceof KubeApiError && err.status === 410)) {
          this.opts.log.info({ kind: this.opts.kind }, 'watch expired (410 Gone): relisting');
        } else {
          this.failures++;
          const ms = Math.min(30_000, 250 * 2 ** Math.min(this.failures, 8));
          this.opts.log.warn(
            { kind: this.opts.kind, err, retryInMs: ms },
            'watch failed; reconnecting',
          );
          await new Promise((r) => setTimeout(r, ms));
        }
        // Relist on every failure: cheap at our scale, and it closes any gap.
        await this.relist().catch((e: unknown) => {
          this.opts.log.warn({ kind: this.opts.kind, err: e }, 'relist failed');
          this.failures++;
        });
      }
    }
  }
}
