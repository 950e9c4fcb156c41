// A CPU profile of a control plane's kube-apiserver (its /debug/pprof, on
// by default), for finding where a slow run's apiserver time goes: set
// JOBFLEET_BENCH_PPROF=<dir> and the operator bench writes one for the floor
// and one for the operator's run; read them with `go tool pprof -top <file>`.
import { writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import https from 'node:https';
import path from 'node:path';

interface Kubeconfig {
  clusters: Array<{ cluster: { server: string; 'certificate-authority': string } }>;
  users: Array<{ user: { token: string } }>;
}

/** Profiles the apiserver for `seconds` from now into `<dir>/<name>.pprof`; resolves when written. */
export function profileApiserver(
  kubeconfigPath: string,
  seconds: number,
  dir: string,
  name: string,
): Promise<void> {
  const kc = JSON.parse(readFileSync(kubeconfigPath, 'utf8')) as Kubeconfig;
  const { server, 'certificate-authority': caFile } = kc.clusters[0]!.cluster;
  return new Promise<Buffer>((resolve, reject) => {
    https
      .get(
        `${server}/debug/pprof/profile?seconds=${seconds}`,
        {
          ca: readFileSync(caFile),
          headers: { authorization: `Bearer ${kc.users[0]!.user.token}` },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve(Buffer.concat(chunks)));
          res.on('error', reject);
        },
      )
      .on('error', reject);
  }).then((body) => writeFile(path.join(dir, `${name}.pprof`), body));
}
