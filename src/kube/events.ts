// Events for the decisions a person wants in `kubectl describe jw`: one per
// decision, not per reconcile — a repeat of the same reason and message
// within ten minutes is dropped, so a steady state writes none.
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { KubeClient, KubeObject } from './client.js';
import type { EventReason } from '../api/reasons.js';

export interface EventTarget {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace: string; uid: string; resourceVersion?: string };
}

/** The object an event is about, as the event's involvedObject names it. */
export function eventTarget(obj: KubeObject): EventTarget {
  return {
    apiVersion: obj.apiVersion,
    kind: obj.kind,
    metadata: {
      name: obj.metadata.name,
      namespace: obj.metadata.namespace as string,
      uid: obj.metadata.uid as string,
    },
  };
}

export class EventRecorder {
  private readonly recent = new Map<string, number>();

  constructor(
    private readonly client: KubeClient,
    private readonly component: string,
    private readonly log: Logger,
    private readonly now: () => number = Date.now,
    /** counts each event written (an API write like any other) */
    private readonly onWrite: () => void = () => undefined,
  ) {}

  async emit(
    target: EventTarget,
    type: 'Normal' | 'Warning',
    reason: EventReason,
    message: string,
  ): Promise<void> {
    const dedupe = `${target.metadata.uid}/${reason}/${message}`;
    const last = this.recent.get(dedupe);
    if (last !== undefined && this.now() - last < 600_000) return;
    this.recent.set(dedupe, this.now());
    if (this.recent.size > 10_000) this.recent.clear();
    const at = new Date(this.now()).toISOString();
    this.onWrite();
    try {
      await this.client.create({
        apiVersion: 'v1',
        kind: 'Event',
        metadata: {
          name: `${target.metadata.name}.${randomBytes(6).toString('hex')}`,
          namespace: target.metadata.namespace,
        },
        involvedObject: {
          apiVersion: target.apiVersion,
          kind: target.kind,
          name: target.metadata.name,
          namespace: target.metadata.namespace,
          uid: target.metadata.uid,
        },
        type,
        reason,
        message,
        source: { component: this.component },
        reportingComponent: this.component,
        firstTimestamp: at,
        lastTimestamp: at,
        count: 1,
      });
    } catch (err) {
      // Events are best effort: never fail a reconcile over one.
      this.log.warn({ reason, err }, 'could not record event');
    }
  }
}
