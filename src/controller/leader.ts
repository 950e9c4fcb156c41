// Leader election on a coordination.k8s.io/v1 Lease, as client-go does it: a
// lease is expired when its record has not changed for leaseDuration as seen
// on *our* clock (no cross-node clock comparison); writes are optimistic
// (resourceVersion preconditions), so two candidates can never both win.
// Every lease call is bounded by the renew deadline (an abort signal): a hung
// apiserver connection cannot keep this replica leading past it, while a
// standby may take the lease once leaseDuration (> renewDeadline) has passed.
import type { Logger } from 'pino';
import { KubeApiError, type KubeClient, type KubeObject } from '../kube/client.js';

export interface LeaderOptions {
  namespace: string;
  name: string;
  identity: string;
  leaseDurationSeconds?: number;
  renewDeadlineSeconds?: number;
  retryPeriodSeconds?: number;
}

interface LeaseSpec {
  holderIdentity?: string;
  leaseDurationSeconds?: number;
  acquireTime?: string;
  renewTime?: string;
  leaseTransitions?: number;
}

const microTime = (d: Date) => d.toISOString().replace('Z', '000Z');

export class LeaderElector {
  private leading = false;
  private stopped = false;
  private observed: { record: string; at: number } | undefined;
  /** the Lease as our last successful write returned it: a leader renews over it without reading first */
  private held: (KubeObject & { spec: LeaseSpec }) | undefined;
  private lastRenew = 0;
  private timer: NodeJS.Timeout | undefined;
  private readonly leaseDuration: number;
  private readonly renewDeadline: number;
  private readonly retryPeriod: number;

  constructor(
    private readonly client: KubeClient,
    private readonly o: LeaderOptions,
    private readonly log: Logger,
    private readonly callbacks: { onStartedLeading(): void; onStoppedLeading(): void },
  ) {
    this.leaseDuration = (o.leaseDurationSeconds ?? 15) * 1000;
    this.renewDeadline = (o.renewDeadlineSeconds ?? 10) * 1000;
    this.retryPeriod = (o.retryPeriodSeconds ?? 2) * 1000;
  }

  get isLeader(): boolean {
    return this.leading;
  }

  start(): void {
    const tick = async () => {
      if (this.stopped) return;
      // A leader's calls end by its renew deadline; a candidate's within one.
      const bound = Math.ceil(
        this.leading
          ? Math.max(1, this.lastRenew + this.renewDeadline - Date.now())
          : this.renewDeadline,
      );
      const ok = await this.tryAcquireOrRenew(AbortSignal.timeout(bound)).catch((err: unknown) => {
        this.log.warn({ err }, 'leader election: lease update failed');
        return false;
      });
      if (this.stopped) return;
      if (ok) this.lastRenew = Date.now();
      if (ok && !this.leading) {
        this.leading = true;
        this.log.info(
          { lease: `${this.o.namespace}/${this.o.name}`, identity: this.o.identity },
          'became leader',
        );
        this.callbacks.onStartedLeading();
      } else if (!ok && this.leading && Date.now() - this.lastRenew >= this.renewDeadline) {
        this.leading = false;
        this.log.warn('lost the leader lease: stopping controllers');
        this.callbacks.onStoppedLeading();
      }
      if (!this.stopped)
        this.timer = setTimeout(() => void tick(), this.retryPeriod * (0.8 + Math.random() * 0.4));
    };
    void tick();
  }

  private async tryAcquireOrRenew(signal: AbortSignal): Promise<boolean> {
    const now = new Date();
    // client-go's fast path: a leader renews over the record of its own last
    // write, one request; if anyone wrote since, the resourceVersion no longer
    // matches (409) and the lease is read as a candidate would.
    const held = this.leading ? this.held : undefined;
    this.held = undefined;
    if (held) {
      try {
        return this.wrote(
          await this.client.replace(
            { ...held, spec: { ...held.spec, renewTime: microTime(now) } },
            signal,
          ),
        );
      } catch (err) {
        if (!(err instanceof KubeApiError && err.status === 409)) throw err;
      }
    }
    const lease = await this.client.find<KubeObject & { spec?: LeaseSpec }>(
      'coordination.k8s.io/v1',
      'Lease',
      this.o.namespace,
      this.o.name,
      signal,
    );
    const mine: LeaseSpec = {
      holderIdentity: this.o.identity,
      leaseDurationSeconds: Math.round(this.leaseDuration / 1000),
      renewTime: microTime(now),
    };
    if (!lease) {
      try {
        const created = await this.client.create<KubeObject & { spec: LeaseSpec }>(
          {
            apiVersion: 'coordination.k8s.io/v1',
            kind: 'Lease',
            metadata: { name: this.o.name, namespace: this.o.namespace },
            spec: { ...mine, acquireTime: microTime(now), leaseTransitions: 0 },
          },
          signal,
        );
        return this.wrote(created);
      } catch (err) {
        if (err instanceof KubeApiError && err.status === 409) return false; // someone else was first
        throw err;
      }
    }
    const spec = lease.spec ?? {};
    const record = JSON.stringify(spec);
    if (this.observed?.record !== record) this.observed = { record, at: Date.now() };
    const holder = spec.holderIdentity ?? '';
    const expired =
      holder === '' || Date.now() - this.observed.at > (spec.leaseDurationSeconds ?? 15) * 1000;
    if (holder !== this.o.identity && !expired) return false;
    const next: LeaseSpec =
      holder === this.o.identity
        ? { ...spec, ...mine }
        : {
            ...spec,
            ...mine,
            acquireTime: microTime(now),
            leaseTransitions: (spec.leaseTransitions ?? 0) + 1,
          };
    try {
      return this.wrote(
        await this.client.replace<KubeObject & { spec: LeaseSpec }>(
          { ...lease, spec: next },
          signal,
        ),
      );
    } catch (err) {
      if (err instanceof KubeApiError && err.status === 409) return false;
      throw err;
    }
  }

  private wrote(lease: KubeObject & { spec: LeaseSpec }): true {
    this.held = lease;
    this.observed = { record: JSON.stringify(lease.spec), at: Date.now() };
    return true;
  }

  /** Stops campaigning; when leading, gives the lease up so a standby takes over at once. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    if (!this.leading) return;
    this.leading = false;
    this.callbacks.onStoppedLeading();
    try {
      const lease = await this.client.get<KubeObject & { spec: LeaseSpec }>(
        'coordination.k8s.io/v1',
        'Lease',
        this.o.namespace,
        this.o.name,
      );
      if (lease.spec.holderIdentity === this.o.identity) {
        await this.client.replace({
          ...lease,
          spec: { ...lease.spec, holderIdentity: '', leaseDurationSeconds: 1 },
        });
      }
    } catch (err) {
      this.log.warn({ err }, 'could not release the leader lease');
    }
  }
}
