// A three-node RabbitMQ 4 cluster for fault tests: each node a host of its
// own in a network namespace, with its own address on a bridge in the test's
// namespace, so that a node can be killed (SIGKILL) or cut off (its link
// down) like a real one. Nodes run from the chroot build-rabbitmq.sh makes.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { startRabbitNode, type RabbitNode, type RabbitNodeOptions } from './rabbitmq-node.js';

const run = promisify(execFile);
const ip = (...args: string[]) => run('ip', args);

export interface ClusterNode {
  /** `name@address` */
  nodename: string;
  address: string;
  amqpUrl: string;
  mgmtUrl: string;
  node: RabbitNode;
}

export interface RabbitCluster {
  nodes: ClusterNode[];
  /** every node's AMQP URL, comma-separated: what JOBFLEET_BROKER_URL takes for a cluster */
  amqpUrls: string;
  mgmtUrls: string;
  /** SIGKILL the node, as a crashed host */
  kill(i: number): Promise<void>;
  /** start a killed node again on its data; it rejoins */
  restart(i: number): Promise<void>;
  /** its link down: the node runs on, cut off from the others and from clients */
  cut(i: number): Promise<void>;
  reconnect(i: number): Promise<void>;
  /** the running nodes the cluster reports, asked through node `via` */
  running(via?: number): Promise<string[]>;
  /**
   * Every node back: links up, killed nodes restarted, a node that stays
   * paused restarted on its data, until all report all running. Run after
   * each fault test, so that one test's failure does not leave the next a
   * node short (a CI run once failed three tests for one).
   */
  heal(): Promise<void>;
  stop(): Promise<void>;
}

/** Starts `size` clustered nodes (joined to the first) and waits until all are running. */
export async function startRabbitCluster(root: string, size = 3): Promise<RabbitCluster> {
  const id = randomBytes(2).toString('hex');
  // A /24 of 10.200.0.0/16 chosen from the id: two test runs on one machine do not meet.
  const net = `10.200.${parseInt(id, 16) % 250}`;
  const bridge = `jfbr${id}`;
  const cookie = randomBytes(16).toString('hex');
  const made: Array<() => Promise<unknown>> = [];
  const nodes: ClusterNode[] = [];
  const options: RabbitNodeOptions[] = [];
  try {
    await ip('link', 'add', bridge, 'type', 'bridge');
    made.push(() => ip('link', 'del', bridge));
    await ip('addr', 'add', `${net}.1/24`, 'dev', bridge);
    await ip('link', 'set', bridge, 'up');
    for (let i = 0; i < size; i++) {
      const ns = `jf-${id}-${i}`;
      const host = `jfv${id}${i}`;
      const address = `${net}.${11 + i}`;
      await ip('netns', 'add', ns);
      made.push(() => ip('netns', 'del', ns));
      await ip('link', 'add', host, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns);
      await ip('link', 'set', host, 'master', bridge);
      await ip('link', 'set', host, 'up');
      await ip('-n', ns, 'addr', 'add', `${address}/24`, 'dev', 'eth0');
      await ip('-n', ns, 'link', 'set', 'eth0', 'up');
      await ip('-n', ns, 'link', 'set', 'lo', 'up');
      options.push({
        root,
        name: `c${id}n${i}`,
        host: address,
        netns: ns,
        amqpPort: 5672,
        mgmtPort: 15672,
        distPort: 25672,
        epmdPort: 4369,
        cookie,
        // RabbitMQ's advice for three nodes: a node cut off from the majority
        // pauses, and resumes (rejoining) when its link is back.
        config: ['cluster_partition_handling = pause_minority'],
        reapWith: process.pid,
      });
    }
    const started = await Promise.all(options.map((o) => startRabbitNode(o)));
    for (const node of started)
      nodes.push({
        nodename: node.nodename,
        address: node.host,
        amqpUrl: node.amqpUrl,
        mgmtUrl: node.mgmtUrl,
        node,
      });
    made.push(() =>
      Promise.all(nodes.map((n) => n.node.stop(5000).then(() => n.node.removeData()))),
    );
    const first = nodes[0]!;
    for (const n of nodes.slice(1)) {
      await n.node.ctl('rabbitmqctl', 'stop_app');
      await n.node.ctl('rabbitmqctl', 'join_cluster', first.nodename);
      await n.node.ctl('rabbitmqctl', 'start_app');
    }
  } catch (err) {
    for (const undo of made.reverse()) await undo().catch(() => undefined);
    throw err;
  }

  const running = async (via = 0): Promise<string[]> => {
    const out = await nodes[via]!.node.ctl('rabbitmqctl', 'cluster_status', '--formatter', 'json');
    return (JSON.parse(out) as { running_nodes: string[] }).running_nodes;
  };
  const killed = new Set<number>();
  const cutOff = new Set<number>();
  const restart = async (i: number) => {
    const node = await startRabbitNode(options[i]!);
    nodes[i] = { ...nodes[i]!, node };
    killed.delete(i);
  };
  const kill = async (i: number) => {
    killed.add(i);
    await nodes[i]!.node.kill();
  };
  /** the nodes that do not report all `size` running (a paused or unreachable one among them) */
  const outOfStep = async () => {
    const out: number[] = [];
    for (let i = 0; i < size; i++)
      if ((await running(i).catch(() => [])).length !== size) out.push(i);
    return out;
  };
  const cluster: RabbitCluster = {
    nodes,
    amqpUrls: nodes.map((n) => n.amqpUrl).join(','),
    mgmtUrls: nodes.map((n) => n.mgmtUrl).join(','),
    kill,
    restart,
    cut: async (i) => {
      cutOff.add(i);
      await ip('link', 'set', `jfv${id}${i}`, 'down');
    },
    reconnect: async (i) => {
      await ip('link', 'set', `jfv${id}${i}`, 'up');
      cutOff.delete(i);
    },
    running,
    heal: async () => {
      for (const i of [...cutOff]) await cluster.reconnect(i);
      for (const i of [...killed]) await restart(i);
      // pause_minority resumes a paused node by itself once it sees the others;
      // one that has not after two minutes is restarted on its data, as a person would.
      for (let round = 0; round < 2; round++) {
        const until = Date.now() + 120_000;
        while (Date.now() < until) {
          if ((await outOfStep()).length === 0) return;
          await new Promise((r) => setTimeout(r, 1000));
        }
        for (const i of await outOfStep()) {
          await kill(i);
          await restart(i);
        }
      }
      throw new Error('the cluster did not heal: a node is still out after restarts');
    },
    stop: async () => {
      for (const undo of made.reverse()) await undo().catch(() => undefined);
    },
  };
  const all = await running();
  if (all.length !== size) {
    await cluster.stop();
    throw new Error(`the cluster formed with ${all.length} of ${size} nodes running`);
  }
  return cluster;
}
