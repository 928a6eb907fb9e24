/**
 * A kube-proxy for the test cluster, so that the API server reaches a
 * Service the way it does in most clusters: it dials the Service's cluster
 * IP (kube-apiserver's default, --enable-aggregator-routing=false), and the
 * node's kube-proxy sends each new connection to one of the Service's ready
 * endpoints, as it last synced them. As kube-proxy's IPVS mode does, the
 * cluster IPs are addresses of a dummy interface of the host (here
 * `vpt-svc0`, a veth where the kernel has no dummy module; in the RFC 5737 range scripts/cluster.sh gives Services); a
 * listener per Service port forwards each connection (TCP, the TLS inside
 * untouched) to an endpoint. Connections already open stay where they are,
 * as conntrack keeps them.
 *
 * Its view of the endpoints is refreshed once per sync period: kube-proxy
 * applies changes at most once per --iptables-min-sync-period / 
 * --ipvs-min-sync-period (1 s by default), so for up to that long after an
 * endpoint stops being ready, new connections may still reach it. That
 * window is what a webhook's shutdown delay has to cover.
 *
 * The `kubernetes` Service (no endpoints here: --endpoint-reconciler-type
 * none) leads to the API server itself, so that pods reach it in-cluster.
 */
import { spawnSync } from 'node:child_process';
import net from 'node:net';
import * as k from './harness.js';

const DUMMY = 'vpt-svc0';

interface Target {
  host: string;
  port: number;
}

export class FakeKubeProxy {
  private readonly listeners = new Map<string, net.Server>();
  private readonly sockets = new Set<net.Socket>();
  private table = new Map<string, Target[]>();
  private timer: NodeJS.Timeout | undefined;
  private syncing = false;
  syncs = 0;
  failure: Error | undefined;
  /** For each Service port (cluster IP:port), the ALPN protocols each connection's TLS ClientHello offered. */
  readonly offered = new Map<string, string[][]>();

  constructor(readonly syncPeriodMs = 1000) {}

  async start(): Promise<void> {
    spawnSync('ip', ['link', 'delete', DUMMY]);
    // A dummy interface where the kernel has the module; else one end of a veth pair, which serves the same.
    const dummy = spawnSync('ip', ['link', 'add', DUMMY, 'type', 'dummy']).status === 0;
    for (const args of [...(dummy ? [] : [['link', 'add', DUMMY, 'type', 'veth', 'peer', 'name', `${DUMMY}p`]]), ['link', 'set', DUMMY, 'up']]) {
      const r = spawnSync('ip', args, { encoding: 'utf8' });
      if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr}`);
    }
    await this.sync();
    this.timer = setInterval(() => void this.sync(), this.syncPeriodMs);
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    for (const s of this.sockets) s.destroy();
    await Promise.all([...this.listeners.values()].map((l) => new Promise((resolve) => l.close(resolve))));
    this.listeners.clear();
    spawnSync('ip', ['link', 'delete', DUMMY]);
  }

  private async sync(): Promise<void> {
    if (this.syncing || this.failure) return;
    this.syncing = true;
    try {
      const services = (await k.api('GET', '/api/v1/services')).json().items as k.Plain[];
      const slices = (await k.api('GET', '/apis/discovery.k8s.io/v1/endpointslices')).json().items as k.Plain[];
      const apiserver = new URL(k.cluster().api);
      const table = new Map<string, Target[]>();
      for (const svc of services) {
        const ip = svc.spec.clusterIP as string | undefined;
        if (!ip || !ip.startsWith(`${k.SERVICE_NET}.`)) continue;
        for (const port of (svc.spec.ports ?? []) as k.Plain[]) {
          const key = `${ip}:${port.port}`;
          let targets: Target[];
          if (svc.metadata.namespace === 'default' && svc.metadata.name === 'kubernetes') targets = [{ host: apiserver.hostname, port: Number(apiserver.port) }];
          else {
            targets = slices
              .filter((s) => s.metadata.namespace === svc.metadata.namespace && s.metadata.labels?.['kubernetes.io/service-name'] === svc.metadata.name)
              .flatMap((s) => {
                const p = ((s.ports ?? []) as k.Plain[]).find((sp) => (sp.name ?? '') === (port.name ?? ''));
                if (!p) return [];
                return ((s.endpoints ?? []) as k.Plain[]).filter((e) => e.conditions?.ready !== false).map((e) => ({ host: e.addresses[0] as string, port: p.port as number }));
              });
          }
          table.set(key, targets);
          if (!this.listeners.has(key)) await this.listen(ip, port.port as number, key);
        }
      }
      this.table = table;
      this.syncs++;
    } catch (error) {
      this.failure = error as Error;
    } finally {
      this.syncing = false;
    }
  }

  private async listen(ip: string, port: number, key: string): Promise<void> {
    spawnSync('ip', ['addr', 'add', `${ip}/32`, 'dev', DUMMY]);
    const server = net.createServer((client) => {
      this.sockets.add(client);
      client.on('close', () => this.sockets.delete(client));
      const targets = this.table.get(key) ?? [];
      // No endpoint: kube-proxy rejects the connection.
      if (targets.length === 0) return client.resetAndDestroy();
      const target = targets[Math.floor(Math.random() * targets.length)]!;
      const upstream = net.connect(target.port, target.host);
      this.sockets.add(upstream);
      upstream.on('close', () => this.sockets.delete(upstream));
      // A refused or reset upstream reaches the client as a reset, as it would through the kernel's NAT.
      upstream.on('error', () => client.resetAndDestroy());
      client.on('error', () => upstream.destroy());
      // The first bytes are the TLS ClientHello: note which protocols the client offered (what the API server asks for).
      client.once('data', (hello: Buffer) => {
        const alpn = offeredAlpn(hello);
        if (alpn) this.offered.set(key, [...(this.offered.get(key) ?? []), alpn]);
        upstream.write(hello);
        client.pipe(upstream);
      });
      upstream.pipe(client);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, ip, () => resolve());
    });
    this.listeners.set(key, server);
  }
}

/**
 * The ALPN protocol names of a TLS ClientHello (RFC 8446 §4.1.2, RFC 7301), or
 * undefined when the bytes are not a whole ClientHello record with that extension.
 */
export function offeredAlpn(record: Buffer): string[] | undefined {
  // record header (5), handshake header (4), version (2), random (32)
  if (record.length < 43 || record[0] !== 0x16 || record[5] !== 0x01) return undefined;
  let at = 43;
  at += 1 + record[at]!; // session id
  at += 2 + record.readUInt16BE(at); // cipher suites
  at += 1 + record[at]!; // compression methods
  const end = at + 2 + record.readUInt16BE(at);
  at += 2;
  while (at + 4 <= end && at + 4 <= record.length) {
    const type = record.readUInt16BE(at);
    const length = record.readUInt16BE(at + 2);
    if (type === 16) {
      const names: string[] = [];
      let p = at + 6;
      while (p < at + 4 + length) {
        const n = record[p]!;
        names.push(record.subarray(p + 1, p + 1 + n).toString('latin1'));
        p += 1 + n;
      }
      return names;
    }
    at += 4 + length;
  }
  return undefined;
}
