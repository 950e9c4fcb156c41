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

export const SERVERS = ['postgres', 'rabbitmq', 'redis'] as const;
export type Server = (typeof SERVERS)[number];
export type ServerCpu = Record<Server, number>;

/** The process names (/proc/PID/stat's comm) of each server. */
const NAMES = new Map<string, Server>([
  ['postgres', 'postgres'],
  ['beam.smp', 'rabbitmq'],
  ['redis-server', 'redis'],
]);

/** Clock ticks per second of /proc's utime and stime (USER_HZ; 100 on Linux when getconf is missing). */
const TICK_MICROS = 1e6 / clockTicks();

function clockTicks(): number {
  try {
    const hz = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
    return hz > 0 ? hz : 100;
  } catch {
    return 100;
  }
}

export const perServer = (f: (s: Server) => number): ServerCpu =>
  Object.fromEntries(SERVERS.map((s) => [s, f(s)])) as ServerCpu;

/** Calls `each` with the server and CPU ticks of every server process (utime, stime, cutime, cstime). */
function eachServerProcess(each: (server: Server, ticks: number) => void): void {
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      continue; // exited meanwhile
    }
    // comm is in parentheses and may hold spaces: the fields follow the last ')'.
    const server = NAMES.get(stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')));
    if (!server) continue;
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // fields 14–17: utime, stime, and cutime, cstime (the reaped children's)
    each(
      server,
      fields.slice(11, 15).reduce((sum, f) => sum + Number(f), 0),
    );
  }
}

/** Each server's CPU (user + system) so far, in µs, summed over its processes. */
export function serverCpuMicros(): ServerCpu {
  const cpu = perServer(() => 0);
  eachServerProcess((server, ticks) => (cpu[server] += ticks * TICK_MICROS));
  return cpu;
}

export function cpuSince(before: ServerCpu, after: ServerCpu = serverCpuMicros()): ServerCpu {
  return perServer((s) => after[s] - before[s]);
}

/** The servers with no process in /proc (another PID namespace, not installed): their column would read 0. */
export function serversNotSeen(): Server[] {
  const seen = new Set<Server>();
  eachServerProcess((server) => seen.add(server));
  return SERVERS.filter((s) => !seen.has(s));
}

/** One process's CPU (user + system, its reaped children's too) so far, in seconds; 0 once it has exited. */
export function processCpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (fields.slice(11, 15).reduce((sum, f) => sum + Number(f), 0) * TICK_MICROS) / 1e6;
  } catch {
    return 0;
  }
}
