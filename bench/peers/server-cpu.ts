// CPU used by the servers the systems lean on (PostgreSQL, RabbitMQ, Redis),
// read from /proc: all of them share this machine's cores with the consumer,
// so a system that moves work from its own process into a server does not
// look cheaper than it is. Every process of a server counts (PostgreSQL's
// backends and background writers alike), whoever it served: nothing else
// runs during a benchmark. A process that exits (a backend whose session
// ended) hands its CPU to its parent's cutime/cstime when reaped, and those
// are counted too, so the sum keeps what exited processes used.
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

export type Server = 'postgres' | 'rabbitmq' | 'redis';
export type ServerCpu = Record<Server, number>;

/** The process names (/proc/PID/stat's comm) of each server. */
const NAMES: Record<string, Server> = {
  postgres: 'postgres',
  'beam.smp': 'rabbitmq',
  'redis-server': 'redis',
};

/** Clock ticks per second of /proc's utime and stime (USER_HZ). */
const TICK_MICROS = 1e6 / Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());

/** Each server's CPU (user + system) so far, in µs, summed over its processes. */
export function serverCpuMicros(): ServerCpu {
  const cpu: ServerCpu = { postgres: 0, rabbitmq: 0, redis: 0 };
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      continue; // exited meanwhile
    }
    // comm is in parentheses and may hold spaces: the fields follow the last ')'.
    const server = NAMES[stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'))];
    if (!server) continue;
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime, stime, and cutime, cstime: the reaped children's
    const ticks = fields.slice(11, 15).reduce((sum, f) => sum + Number(f), 0);
    cpu[server] += ticks * TICK_MICROS;
  }
  return cpu;
}

export function cpuSince(before: ServerCpu, after: ServerCpu = serverCpuMicros()): ServerCpu {
  return {
    postgres: after.postgres - before.postgres,
    rabbitmq: after.rabbitmq - before.rabbitmq,
    redis: after.redis - before.redis,
  };
}
