// The queue and fleet the scaling simulator drives, per message: Poisson (or
// even) arrivals into a FIFO queue, replicas with `prefetch` slots that each
// serve one message for a time drawn from a distribution, pods that take
// time to start and that drain (stop taking, finish what they hold) when
// removed, and a dependency that can throttle or slow down with load. A
// fluid model (rates, no per-message service) is kept to validate it against.
import type { HeadReading } from '../src/reconcile/model/observation.js';
import { prng as rng } from '../test/ground/prng.js';

export interface Service {
  /** mean handler time (s) */
  mean: number;
  /** lognormal σ; 0 = every message takes exactly the mean */
  sigma: number;
}

export interface Dependency {
  /** calls/s it accepts; beyond it calls are refused (Retry-After 1 s) */
  capacity?: number;
  /** its latency grows with the calls in flight: × (1 + inflight / knee) */
  knee?: number;
}

export interface Trace {
  name: string;
  seconds: number;
  /** arrivals per second at time t (may use the seed's own random stream for on/off traces) */
  rate(t: number): number;
  service: Service;
  dependency?: Dependency;
  /** what the trace is for, one line */
  about: string;
}

export const MODEL = {
  prefetch: 8,
  startDelay: 15,
  objective: 30,
  maxReplicas: 80,
  /** how long a refused call holds its slot (s), and when it comes back */
  throttledCallSeconds: 0.05,
  retryAfterSeconds: 1,
};

/** What is true at the end of a second (the scalers see it only through ./scaling-sim.ts's sampling). */
export interface Truth {
  t: number;
  depth: number;
  /** the oldest waiting message's age as the broker shows it (a retry's counts from when it came back) */
  oldestAge: number;
  /** …and counted from its first arrival: how late the work really is */
  oldestWait: number;
  arrived: number;
  completed: number;
  throttled: number;
  /** the workers' counters: handler seconds (refused calls included, as the worker's histogram
   * counts them) and jobs completed */
  handlerSeconds: number;
  completedTotal: number;
  inflight: number;
  ready: number;
  /** replicas paid for: starting, ready and draining */
  paid: number;
}

export interface Fleet {
  /** advance one second */
  tick(t: number): Truth;
  /**
   * What each ready replica's worker reports of the queue's head at time
   * `now` (worker/queue-head.ts): its newest delivery's age then and when,
   * and how long it has had a free slot with nothing delivered. The fluid
   * model, without messages, has none.
   */
  heads?(now: number): HeadReading[];
  /** ask for n replicas at time t (starting ones take MODEL.startDelay) */
  scale(n: number, t: number): void;
  /** arrivals per second, as they happened (for the oracle) */
  readonly arrivals: number[];
}

/** Binary min-heap of (time, payload) on parallel arrays. */
class Heap {
  private t: number[] = [];
  private p: number[] = [];
  get size(): number {
    return this.t.length;
  }
  get minTime(): number {
    return this.t[0]!;
  }
  get minPayload(): number {
    return this.p[0]!;
  }
  push(time: number, payload: number): void {
    const t = this.t;
    const p = this.p;
    let i = t.length;
    t.push(time);
    p.push(payload);
    while (i > 0) {
      const up = (i - 1) >> 1;
      if (t[up]! <= time) break;
      t[i] = t[up]!;
      p[i] = p[up]!;
      i = up;
    }
    t[i] = time;
    p[i] = payload;
  }
  /** each payload's earliest time */
  earliestByPayload(): Map<number, number> {
    const m = new Map<number, number>();
    for (let i = 0; i < this.t.length; i++)
      if (this.t[i]! < (m.get(this.p[i]!) ?? Infinity)) m.set(this.p[i]!, this.t[i]!);
    return m;
  }
  /** add k to every payload (positions, after the ring buffer is rebased) */
  shift(k: number): void {
    for (let i = 0; i < this.p.length; i++) this.p[i]! += k;
  }
  pop(): void {
    const t = this.t;
    const p = this.p;
    const lastT = t.pop()!;
    const lastP = p.pop()!;
    const n = t.length;
    if (n === 0) return;
    let i = 0;
    for (;;) {
      let c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && t[c + 1]! < t[c]!) c++;
      if (t[c]! >= lastT) break;
      t[i] = t[c]!;
      p[i] = p[c]!;
      i = c;
    }
    t[i] = lastT;
    p[i] = lastP;
  }
}

interface Replica {
  state: 'starting' | 'ready' | 'draining' | 'gone';
  readyAt: number;
  /** when its last message finishes */
  busyUntil: number;
  /** its newest delivery: when (s), and when that message entered the queue */
  deliveredAt: number;
  deliveredEntered: number;
}

/** Per-message fleet: Poisson arrivals (or even ones), service drawn per message. */
export function messageFleet(trace: Trace, seed: number, even = false): Fleet {
  // Arrivals and service times draw from streams of their own, so every scaler sees the same arrivals.
  const random = rng(seed);
  const serviceRandom = rng(seed + 7919);
  const normal = (): number => {
    const u = 1 - serviceRandom();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * serviceRandom());
  };
  const { mean, sigma } = trace.service;
  const mu = Math.log(mean) - (sigma * sigma) / 2;
  const draw = (): number => (sigma === 0 ? mean : Math.exp(mu + sigma * normal()));
  const dep = trace.dependency;
  // The dependency's concurrency: what it accepts per second × how long each call takes.
  const limit = dep?.capacity !== undefined ? dep.capacity * mean : Infinity;

  // The queue: when each message entered it, and when it first arrived (a refused call
  // comes back later, timestamped then, as the worker's retry copies are), a ring buffer.
  let queue = new Float64Array(1 << 16);
  let origin = new Float64Array(1 << 16);
  let head = 0;
  let tail = 0;
  const late = new Heap(); // retries in the queue: (first arrival, position); stale once dequeued
  const push = (at: number, first = at): void => {
    if (tail - head === queue.length) {
      const grown = new Float64Array(queue.length * 2);
      const grownOrigin = new Float64Array(queue.length * 2);
      for (let i = head; i < tail; i++) {
        grown[i - head] = queue[i % queue.length]!;
        grownOrigin[i - head] = origin[i % queue.length]!;
      }
      late.shift(-head);
      queue = grown;
      origin = grownOrigin;
      tail -= head;
      head = 0;
    }
    if (first < at) late.push(first, tail);
    origin[tail % queue.length] = first;
    queue[tail++ % queue.length] = at;
  };
  const slots = new Heap(); // (free at, replica)
  const calls = new Heap(); // calls in flight at the dependency: (ends at, 0)
  const retries = new Heap(); // refused calls coming back: (at, first arrival)
  const replicas: Replica[] = [];
  const arrivals: number[] = [];
  let nextArrival = 0;
  let carry = 0;
  let started = 0;
  const completedAt: number[] = []; // completions per second, by when they finish
  const secondsAt: number[] = [];
  const freedAt: number[] = []; // slots freed per second (completions and refused calls)
  let freedBefore = 0;
  let handlerSeconds = 0;
  let completedTotal = 0;

  const addReplica = (readyAt: number): void => {
    replicas.push({
      state: 'starting',
      readyAt,
      busyUntil: readyAt,
      deliveredAt: 0,
      deliveredEntered: 0,
    });
  };
  addReplica(0);

  return {
    arrivals,
    heads(now) {
      const free = slots.earliestByPayload();
      return replicas.flatMap((r, i) => {
        if (r.state !== 'ready') return [];
        // a slot free since before now that the dispatcher left unused: nothing was waiting
        const freeSince = free.get(i);
        const idleSince =
          freeSince !== undefined && freeSince < now
            ? Math.max(freeSince, r.deliveredAt, r.readyAt)
            : undefined;
        return [
          {
            lastAgeSeconds: r.deliveredAt ? r.deliveredAt - r.deliveredEntered : 0,
            lastAtMs: r.deliveredAt * 1000,
            lastUntimestampedAtMs: 0,
            idleSeconds: idleSince === undefined ? 0 : now - idleSince,
          },
        ];
      });
    },
    scale(n, t) {
      const live = replicas.filter((r) => r.state === 'starting' || r.state === 'ready');
      for (let k = live.length; k < n; k++) addReplica(t + MODEL.startDelay);
      // Removing: pods still starting go first, then the newest ready ones, which drain.
      let drop = live.length - n;
      for (const state of ['starting', 'ready'] as const)
        for (let k = live.length - 1; k >= 0 && drop > 0; k--)
          if (live[k]!.state === state) {
            live[k]!.state = state === 'starting' ? 'gone' : 'draining';
            drop--;
          }
    },
    tick(t) {
      const end = t + 1;
      for (let i = 0; i < replicas.length; i++) {
        const r = replicas[i]!;
        if (r.state === 'starting' && r.readyAt < end) {
          r.state = 'ready';
          for (let s = 0; s < MODEL.prefetch; s++) slots.push(Math.max(t, r.readyAt), i);
        }
      }
      // arrivals in [t, t + 1), and refused calls coming back
      let arrived = 0;
      const rate = trace.rate(t);
      if (even) {
        carry += rate;
        const n = Math.floor(carry);
        carry -= n;
        for (let k = 0; k < n; k++) push(t + k / Math.max(n, 1));
        arrived = n;
      } else if (rate > 0) {
        if (nextArrival < t) nextArrival = t - Math.log(1 - random()) / rate;
        while (nextArrival < end) {
          while (retries.size && retries.minTime <= nextArrival) {
            push(retries.minTime, retries.minPayload);
            retries.pop();
          }
          push(nextArrival);
          arrived++;
          nextArrival += -Math.log(1 - random()) / rate;
        }
      }
      while (retries.size && retries.minTime < end) {
        push(retries.minTime, retries.minPayload);
        retries.pop();
      }
      arrivals.push(arrived);

      let throttled = 0;
      while (tail > head && slots.size) {
        const replica = slots.minPayload;
        const r = replicas[replica]!;
        if (r.state !== 'ready') {
          slots.pop(); // a draining pod takes nothing new
          continue;
        }
        const start = Math.max(slots.minTime, queue[head % queue.length]!);
        if (start >= end) break;
        const first = origin[head % queue.length]!;
        r.deliveredAt = start;
        r.deliveredEntered = queue[head % queue.length]!;
        head++;
        slots.pop();
        while (calls.size && calls.minTime <= start) calls.pop();
        let busy: number;
        if (calls.size >= limit) {
          throttled++;
          busy = MODEL.throttledCallSeconds;
          retries.push(start + MODEL.retryAfterSeconds, first);
        } else {
          busy = draw() * (dep?.knee ? 1 + calls.size / dep.knee : 1);
          if (dep) calls.push(start + busy, 0);
          const sec = Math.floor(start + busy);
          completedAt[sec] = (completedAt[sec] ?? 0) + 1;
        }
        started++;
        const freed = Math.floor(start + busy);
        freedAt[freed] = (freedAt[freed] ?? 0) + 1;
        secondsAt[freed] = (secondsAt[freed] ?? 0) + busy;
        r.busyUntil = Math.max(r.busyUntil, start + busy);
        slots.push(start + busy, replica);
      }
      const completed = completedAt[t] ?? 0;
      completedTotal += completed;
      freedBefore += freedAt[t] ?? 0;
      freedAt[t] = 0;
      handlerSeconds += secondsAt[t] ?? 0;
      completedAt[t] = 0;
      secondsAt[t] = 0;

      let ready = 0;
      let paid = 0;
      for (const r of replicas) {
        if (r.state === 'ready') ready++;
        if (r.state === 'starting' || r.state === 'ready') paid++;
        else if (r.state === 'draining') {
          if (r.busyUntil > t) paid++;
          else r.state = 'gone';
        }
      }
      while (late.size && late.minPayload < head) late.pop();
      const firstWaiting = Math.min(
        tail > head ? origin[head % queue.length]! : end,
        late.size ? late.minTime : end,
      );
      return {
        t,
        depth: tail - head,
        oldestAge: tail > head ? end - queue[head % queue.length]! : 0,
        oldestWait: end - firstWaiting,
        arrived,
        completed,
        throttled,
        handlerSeconds,
        completedTotal,
        inflight: started - freedBefore,
        ready,
        paid,
      };
    },
  };
}

/**
 * The fluid model the per-message one is validated against: rates, not
 * messages — each second every ready replica serves prefetch ÷ mean service
 * time from FIFO buckets, arrivals are even, and nothing throttles.
 */
export function fluidFleet(trace: Trace): Fleet {
  const perReplica = MODEL.prefetch / trace.service.mean;
  const queue: Array<{ at: number; n: number }> = [];
  const starting: Array<{ at: number; n: number }> = [];
  const arrivals: number[] = [];
  let ready = 1;
  let carry = 0;
  let handlerSeconds = 0;
  let completedTotal = 0;
  return {
    arrivals,
    scale(n, t) {
      const total = ready + starting.reduce((s, x) => s + x.n, 0);
      if (n > total) starting.push({ at: t + MODEL.startDelay, n: n - total });
      let drop = total - n;
      while (drop > 0 && starting.length) {
        const last = starting.at(-1)!;
        const k = Math.min(drop, last.n);
        last.n -= k;
        drop -= k;
        if (last.n === 0) starting.pop();
      }
      ready -= Math.max(0, drop);
    },
    tick(t) {
      carry += trace.rate(t);
      const arrived = Math.floor(carry);
      carry -= arrived;
      arrivals.push(arrived);
      if (arrived) queue.push({ at: t, n: arrived });
      while (starting.length && starting[0]!.at < t + 1) ready += starting.shift()!.n;
      let capacity = ready * perReplica;
      let done = 0;
      while (capacity > 0 && queue.length) {
        const head = queue[0]!;
        const take = Math.min(head.n, capacity);
        head.n -= take;
        capacity -= take;
        done += take;
        if (head.n < 1e-9) queue.shift();
      }
      completedTotal += done;
      handlerSeconds += done * trace.service.mean;
      return {
        t,
        depth: queue.reduce((s, b) => s + b.n, 0),
        oldestAge: queue.length ? t + 1 - queue[0]!.at : 0,
        oldestWait: queue.length ? t + 1 - queue[0]!.at : 0,
        arrived,
        completed: done,
        throttled: 0,
        handlerSeconds,
        completedTotal,
        inflight: Math.min(ready * MODEL.prefetch, done * trace.service.mean),
        ready,
        paid: ready + starting.reduce((s, x) => s + x.n, 0),
      };
    },
  };
}
