// The broker's settings that can lose or stall a JobWorker's jobs, read from
// the RabbitMQ management API the queue signals use: the vhost's policies and
// operator policies, the feature flags, the deprecated features in use
// (RabbitMQ 4.x; the path is absent before: none). src/reconcile/broker/
// decides what they mean. One read per broker and vhost at most every
// `readMs`, shared by its JobWorkers; a failed read keeps the last good one
// for a few minutes, so one refused call does not flap the condition.
import type { BrokerPolicy, BrokerSettings, BrokerSettingsRead } from '../reconcile/model/index.js';
import {
  ManagementApiError,
  ManagementNotFound,
  ManagementRefused,
  managementGet,
} from './rabbitmq.js';

/** How long a good read stands in for failed ones. */
const STALE_OK_MS = 5 * 60_000;

interface Entry {
  at: number;
  read: BrokerSettingsRead;
  /** the last read that succeeded, and when */
  good?: { at: number; read: BrokerSettingsRead };
  pending?: Promise<BrokerSettingsRead>;
}

export class BrokerSettingsReader {
  private readonly cache = new Map<string, Entry>();

  constructor(
    private readonly now: () => number = Date.now,
    private readonly timeoutMs = 5000,
  ) {}

  /** The settings of `vhost` on the broker `mgmtUrl` names, at most `readMs` old. */
  async read(mgmtUrl: string, vhost: string, readMs: number): Promise<BrokerSettingsRead> {
    const key = `${mgmtUrl}\n${vhost}`;
    const hit = this.cache.get(key);
    const now = this.now();
    if (hit && (hit.pending || now - hit.at < readMs)) return hit.pending ?? hit.read;
    if (this.cache.size > 1000) this.cache.clear();
    const pending = this.fetch(mgmtUrl, vhost).then((read) => {
      const good = read.ok ? { at: this.now(), read } : hit?.good;
      const kept = !read.ok && good && this.now() - good.at < STALE_OK_MS ? good.read : read;
      this.cache.set(key, { at: this.now(), read: kept, ...(good && { good }) });
      return kept;
    });
    this.cache.set(key, { ...(hit ?? { at: 0, read: pendingRead }), pending });
    return pending;
  }

  private async fetch(url: string, vhost: string): Promise<BrokerSettingsRead> {
    const v = encodeURIComponent(vhost);
    const get = <T>(path: string, what: string) =>
      managementGet<T>(url, path, what, this.timeoutMs);
    // All four at once; when several fail, the first in this order is named, so an unreachable
    // broker's condition reads the same at every read (whichever request failed first, it
    // would otherwise flap, and each flap is a status write).
    const reads = await Promise.allSettled([
      get<BrokerPolicy[]>(`/api/policies/${v}`, `policies of vhost "${vhost}"`),
      get<BrokerPolicy[]>(`/api/operator-policies/${v}`, `operator policies of vhost "${vhost}"`),
      // both need the administrator tag: a monitoring user's management URL still checks policies
      get<BrokerSettings['featureFlags']>('/api/feature-flags', 'feature flags').catch(
        (err: unknown) => {
          if (err instanceof ManagementRefused) return [];
          throw err;
        },
      ),
      get<Array<{ name: string }>>('/api/deprecated-features/used', 'deprecated features').catch(
        (err: unknown) => {
          // before RabbitMQ 3.13 the path is absent: none to say
          if (err instanceof ManagementNotFound || err instanceof ManagementRefused) return [];
          throw err;
        },
      ),
    ] as const);
    try {
      const [policies, operatorPolicies, featureFlags, deprecated] = [
        settled(reads[0]),
        settled(reads[1]),
        settled(reads[2]),
        settled(reads[3]),
      ];
      return {
        ok: true,
        settings: {
          policies: policies.map(policyOf),
          operatorPolicies: operatorPolicies.map(policyOf),
          featureFlags: featureFlags.map((f) => ({
            name: f.name,
            state: f.state,
            ...(f.stability && { stability: f.stability }),
          })),
          deprecatedFeaturesUsed: deprecated.map((d) => d.name),
        },
      };
    } catch (err) {
      return {
        ok: false,
        error:
          err instanceof ManagementApiError
            ? err.message
            : `the management API read failed: ${(err as Error).message}`,
      };
    }
  }
}

/** A settled read's value, or its error thrown. */
function settled<T>(r: PromiseSettledResult<T>): T {
  if (r.status === 'rejected') throw r.reason;
  return r.value;
}

const pendingRead: BrokerSettingsRead = { ok: false, error: 'not read yet' };

/** Only what the decision reads: the API lists more (vhost…). */
function policyOf(p: BrokerPolicy): BrokerPolicy {
  return {
    name: p.name,
    pattern: p.pattern,
    'apply-to': p['apply-to'] ?? 'all',
    priority: Number(p.priority ?? 0),
    definition: p.definition ?? {},
  };
}
