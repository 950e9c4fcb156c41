// The fixed offered load for the latency run: job i is sent at t0 + i/rate,
// whatever the previous sends are doing (an open loop: a slow enqueue shows
// up as latency, not as a lower rate). Each job carries its send time.
import { wallMs, type Producer } from './system.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function producePaced(
  producer: Producer,
  rate: number,
  seconds: number,
): Promise<{ sent: number; acceptedRate: number; sendMs: number[] }> {
  const total = Math.round(rate * seconds);
  const inflight = new Set<Promise<void>>();
  /** by job number: how long its send took to be accepted (committed, confirmed) */
  const sendMs: number[] = new Array<number>(total).fill(NaN);
  let failure: Error | undefined;
  const t0 = performance.now();
  let n = 0;
  while (n < total) {
    const due = Math.min(total, Math.floor(((performance.now() - t0) * rate) / 1000) + 1);
    for (; n < due; n++) {
      const job = { n, at: wallMs() };
      const p: Promise<void> = producer
        .send(job)
        .then(() => void (sendMs[job.n] = wallMs() - job.at))
        .catch(
          (err: unknown) =>
            void (failure ??=
              err instanceof Error ? err : new Error(`send failed: ${JSON.stringify(err)}`)),
        )
        .finally(() => inflight.delete(p));
      inflight.add(p);
    }
    if (failure) throw failure;
    await sleep(Math.max(0, t0 + (n * 1000) / rate - performance.now()));
  }
  await Promise.all(inflight);
  if (failure) throw failure;
  // Below `rate` when the system's enqueue path could not keep up with the schedule.
  const acceptedRate = (total * 1000) / (performance.now() - t0);
  return { sent: total, acceptedRate, sendMs };
}
