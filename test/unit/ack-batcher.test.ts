// AckBatcher: a run of settled deliveries is acked with one `multiple`
// frame, and no frame ever covers a delivery that is still running.
import { describe, expect, it } from 'vitest';
import { AckBatcher } from '../../worker/ack-batcher.js';

function batcher(tags: number[]) {
  const frames: Array<[number, boolean]> = [];
  const b = new AckBatcher((tag, upTo) => frames.push([tag, upTo]));
  for (const t of tags) b.delivered(t);
  return { b, frames };
}

/** every tag a sequence of frames acknowledges, as RabbitMQ reads them */
function acked(frames: Array<[number, boolean]>, delivered: number[]): number[] {
  const out = new Set<number>();
  for (const [tag, upTo] of frames) {
    if (upTo) for (const t of delivered) if (t <= tag) out.add(t);
    out.add(tag);
  }
  return [...out].sort((a, b) => a - b);
}

const turn = () => new Promise<void>((r) => setImmediate(r));

describe('AckBatcher', () => {
  it('acks settled in one turn go at its end, a consecutive run as one frame', async () => {
    const { b, frames } = batcher([1, 2, 3, 4]);
    for (const t of [3, 1, 2]) b.ack(t);
    expect(frames).toEqual([]);
    await turn();
    expect(frames).toEqual([[3, true]]);
  });

  it('a delivery still running is never covered: acks behind it go one by one', async () => {
    const { b, frames } = batcher([1, 2, 3, 4, 5]);
    for (const t of [1, 2, 4, 5]) b.ack(t);
    await turn();
    expect(frames).toEqual([
      [2, true],
      [4, false],
      [5, false],
    ]);
    expect(acked(frames, [1, 2, 3, 4, 5])).toEqual([1, 2, 4, 5]);
    // 3 ends later: already-acked 4 and 5 are not sent again
    b.ack(3);
    await turn();
    expect(frames.slice(3)).toEqual([[3, false]]);
  });

  it('a requeued delivery may lie inside a later run; the run ends on the last ack', async () => {
    const { b, frames } = batcher([1, 2, 3, 4]);
    b.settledElsewhere(2);
    b.settledElsewhere(4);
    b.ack(1);
    b.ack(3);
    await turn();
    expect(frames).toEqual([[3, true]]);
  });

  it('flush sends at once (before a channel closes); random orders never ack a running delivery', () => {
    let seed = 42;
    const rand = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    for (let round = 0; round < 200; round++) {
      const tags = Array.from({ length: 20 }, (_, i) => i + 1);
      const { b, frames } = batcher(tags);
      const order = [...tags].sort(() => rand() - 0.5);
      const done = new Set<number>();
      for (const t of order.slice(0, 12)) {
        b.ack(t);
        done.add(t);
        if (rand() < 0.3) b.flush();
        expect(acked(frames, tags).every((x) => done.has(x))).toBe(true);
      }
      b.flush();
      expect(acked(frames, tags)).toEqual([...done].sort((x, y) => x - y));
    }
  });

  it('a delivery that never settles: what is remembered stays bounded while the rest go on', () => {
    const frames: Array<[number, boolean]> = [];
    const b = new AckBatcher((tag, upTo) => frames.push([tag, upTo]));
    b.delivered(1); // hangs
    for (let tag = 2; tag <= 100_001; tag++) {
      b.delivered(tag);
      b.ack(tag);
      if (tag % 64 === 0) b.flush();
    }
    b.flush();
    expect(b.tracked).toBe(1);
    expect(frames).toHaveLength(100_000); // each behind the hung one, alone
    expect(frames.every(([tag, upTo]) => tag > 1 && !upTo)).toBe(true);
    b.ack(1);
    b.flush();
    expect(frames.at(-1)).toEqual([1, false]);
    expect(b.tracked).toBe(0);
  });
});
