/**
 * A kubelet for the webhook's own pods, so that the chart runs as deployed:
 * the Deployment's pods (made by kube-controller-manager from the chart's
 * template) are bound to a Node of the test, and each runs the built bundle
 * as the image would (ENTRYPOINT node vram-preflight.cjs, the container's
 * args, env, volumes as files, uid 65532 as the chart's securityContext asks)
 * in a network namespace of its own with an address of RFC 5737's TEST-NET-3
 * (203.0.113.0/24: reserved, never routed), reached only through the veth
 * pairs this test creates. Its readinessProbe is probed as the kubelet
 * probes it and reported in the pod's status, so kube-controller-manager's
 * EndpointSlice controller publishes ready endpoints, and the API server
 * calls the webhook through the chart's Service (its cluster IP, forwarded by
 * the test's kube-proxy, kube-proxy.ts), over HTTP/1.1, checking the chart's certificate against the
 * Service's DNS name, exactly as in a cluster. Deleting a pod runs the
 * kubelet's termination: SIGTERM, the grace period, SIGKILL, then the pod
 * object is removed.
 *
 * What it does not do: images, cgroups, resource limits, liveness restarts,
 * the read-only root filesystem. In-cluster API access works as in a pod:
 * KUBERNETES_SERVICE_HOST/PORT name the `kubernetes` Service, which the
 * test's kube-proxy leads to the API server, with the service account's
 * bound token projected into the pod's volume.
 * Needs root (network namespaces) and iproute2.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, realpathSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import * as k from './harness.js';

/** Where a pod sees the bundle (the image's /app): made in an overlay of the host's /opt, in the pod's mount namespace only. */
const IMAGE_DIR = '/opt/vram-preflight-image';

const ip = (args: string[]) => {
  const r = spawnSync('ip', args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr}`);
};

export function requireRoot(): void {
  if (process.getuid?.() !== 0) throw new Error('the Service-route tests run the webhook pods in network namespaces of their own: run them as root (scripts/test.sh, CI)');
  if (spawnSync('ip', ['-V']).status !== 0) throw new Error('the Service-route tests need ip (Debian package iproute2): run ./scripts/test.sh');
}

interface RunningPod {
  uid: string;
  name: string;
  ip: string;
  netns: string;
  hostVeth: string;
  child: ChildProcess;
  exited: Promise<number | null>;
  ready: boolean;
  probeFailures: number;
  probeSuccesses: number;
  lastProbe: number;
  terminating: boolean;
  stderr: string;
}

export interface KubeletEvent {
  at: number;
  pod: string;
  what: string;
}

export class FakeKubelet {
  readonly node: string;
  private readonly id = Math.random().toString(36).slice(2, 6);
  private readonly pods = new Map<string, RunningPod>();
  private nextIp = 10;
  /** The pods' /24 (RFC 5737 TEST-NET-3), checked unused by this machine's own network at start. */
  private readonly net = k.POD_NET;
  private timer: NodeJS.Timeout | undefined;
  private busy = false;
  private stopped = false;
  readonly events: KubeletEvent[] = [];
  /** The first thing this kubelet could not do: it stops syncing, and waits report it. */
  failure: Error | undefined;

  constructor(
    private readonly ns: string,
    private readonly selector: string,
    private readonly bundle: string,
    private readonly dir: string,
  ) {
    this.node = `vpt-node-${this.id}`;
  }

  async start(): Promise<void> {
    requireRoot();
    FakeKubelet.removeStaleNetworks();
    checkPodNetUnused();
    // uid 65532 (the chart's runAsUser) must read the bundle and the volumes.
    chmodSync(this.dir, 0o755);
    for (let d = path.dirname(this.bundle); d.startsWith(this.dir); d = path.dirname(d)) chmodSync(d, 0o755);
    k.applyObjects([{ apiVersion: 'v1', kind: 'Node', metadata: { name: this.node, labels: { 'kubernetes.io/hostname': this.node, 'vram-preflight.test/fake': 'true' } } }]);
    const status = {
      status: {
        capacity: { cpu: '16', memory: '64Gi', pods: '110' },
        allocatable: { cpu: '16', memory: '64Gi', pods: '110' },
        conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', message: 'fake kubelet of the test', lastHeartbeatTime: new Date().toISOString(), lastTransitionTime: new Date().toISOString() }],
        addresses: [{ type: 'InternalIP', address: `${this.net}.1` }],
      },
    };
    const res = await k.api('PATCH', `/api/v1/nodes/${this.node}/status`, status, { 'content-type': 'application/merge-patch+json' });
    if (res.status !== 200) throw new Error(`node status: ${res.status} ${res.text}`);
    this.timer = setInterval(() => void this.sync(), 100);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    while (this.busy) await k.sleep(20);
    for (const pod of this.pods.values()) {
      pod.child.kill('SIGKILL');
      await pod.exited;
      this.removeNetwork(pod);
    }
    this.pods.clear();
    // Pods whose termination was still under way.
    const namespaces = spawnSync('ip', ['netns', 'list'], { encoding: 'utf8' }).stdout;
    for (const line of namespaces.split('\n')) if (line.startsWith(`vpt-${this.id}-`)) spawnSync('ip', ['netns', 'delete', line.split(' ')[0]!]);
    k.kubectl(['delete', 'node', this.node, '--wait=false']);
  }

  /** Log lines of every pod (JSON lines of the webhook), for a failure's message. */
  logs(): string {
    return (this.failure ? `the fake kubelet failed: ${this.failure.stack}\n` : '') + [...this.pods.values()].map((p) => `== ${p.name}\n${p.stderr}`).join('\n');
  }

  private async sync(): Promise<void> {
    if (this.busy || this.failure || this.stopped) return;
    this.busy = true;
    try {
      const list = await k.api('GET', `/api/v1/namespaces/${this.ns}/pods?labelSelector=${encodeURIComponent(this.selector)}`);
      if (list.status !== 200) return;
      const seen = new Set<string>();
      for (const pod of list.json().items as k.Plain[]) {
        seen.add(pod.metadata.uid);
        const running = this.pods.get(pod.metadata.uid);
        if (!pod.spec.nodeName) await this.bind(pod);
        else if (pod.spec.nodeName !== this.node) continue;
        else if (!running && !pod.metadata.deletionTimestamp) await this.run(pod);
        else if (running && pod.metadata.deletionTimestamp && !running.terminating) void this.terminate(running, pod);
        else if (running && !running.terminating) await this.probe(running, pod);
      }
      // Removed behind our back (a forced delete): stop it.
      for (const running of this.pods.values()) if (!seen.has(running.uid) && !running.terminating) void this.terminate(running, undefined);
    } catch (error) {
      this.failure = error as Error;
    } finally {
      this.busy = false;
    }
  }

  private record(pod: string, what: string): void {
    this.events.push({ at: Date.now(), pod, what });
  }

  private async bind(pod: k.Plain): Promise<void> {
    await k.api('POST', `/api/v1/namespaces/${this.ns}/pods/${pod.metadata.name}/binding`, { apiVersion: 'v1', kind: 'Binding', metadata: { name: pod.metadata.name }, target: { apiVersion: 'v1', kind: 'Node', name: this.node } });
  }

  private async run(pod: k.Plain): Promise<void> {
    const n = this.nextIp++;
    if (n > 250) throw new Error('the fake kubelet ran out of addresses');
    const podIp = `${this.net}.${n}`;
    const netns = `vpt-${this.id}-${n}`;
    const hostVeth = `vph${this.id}${n}`;
    // A network namespace per pod, joined to the host by a veth pair: the pod's address on its side,
    // a /32 route to it on the host's side (the .1 of the pods' range on every host end: the pods' way back).
    ip(['netns', 'add', netns]);
    ip(['link', 'add', hostVeth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', netns]);
    ip(['addr', 'add', `${this.net}.1/32`, 'dev', hostVeth]);
    ip(['link', 'set', hostVeth, 'up']);
    ip(['route', 'replace', `${podIp}/32`, 'dev', hostVeth]);
    ip(['-n', netns, 'addr', 'add', `${podIp}/32`, 'dev', 'eth0']);
    ip(['-n', netns, 'link', 'set', 'lo', 'up']);
    ip(['-n', netns, 'link', 'set', 'eth0', 'up']);
    ip(['-n', netns, 'route', 'add', `${this.net}.1/32`, 'dev', 'eth0']);
    // Services' cluster IPs are reached through the node, where the test's kube-proxy listens.
    ip(['-n', netns, 'route', 'add', `${k.SERVICE_NET}.0/24`, 'via', `${this.net}.1`, 'dev', 'eth0']);

    const container = pod.spec.containers[0] as k.Plain;
    const root = path.join(this.dir, `pod-${n}`);
    let mounts: Map<string, string>;
    try {
      mounts = await this.volumes(pod, container, root);
    } catch (error) {
      spawnSync('ip', ['netns', 'delete', netns]);
      throw error;
    }
    if (container.command) throw new Error('the fake kubelet runs the image\'s ENTRYPOINT (node vram-preflight.cjs) with args: the chart now sets command');
    // As the kubelet gives every container: where the API server's Service is.
    const env: Record<string, string> = { PATH: process.env.PATH!, HOME: '/tmp', KUBERNETES_SERVICE_HOST: `${k.SERVICE_NET}.1`, KUBERNETES_SERVICE_PORT: '443' };
    for (const e of (container.env ?? []) as k.Plain[]) env[e.name] = this.envValue(e, pod, container, podIp);
    const uid = String(pod.spec.securityContext?.runAsUser ?? container.securityContext?.runAsUser ?? 65532);
    const gid = String(pod.spec.securityContext?.runAsGroup ?? uid);
    // The image: the built bundle's directory, mounted where a path of the host holds it (the pod's /tmp may hide the test's temp dir).
    mounts.set(IMAGE_DIR, path.dirname(this.bundle));
    const start = ['setpriv', `--reuid=${uid}`, `--regid=${gid}`, '--clear-groups', '--', process.execPath, path.join(IMAGE_DIR, path.basename(this.bundle)), ...((container.args ?? []) as string[])];
    // `ip netns exec` runs the command in a mount namespace of its own: there the volumes are mounted at
    // their mountPaths (over an overlay of the host's directory where a path must be created, so that
    // nothing of the host's file system changes), then the container's start runs as its user.
    const child = spawn('ip', ['netns', 'exec', netns, 'sh', '-ec', mountScript(mounts, path.join(root, '.overlay')), 'pod', ...start], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    const running: RunningPod = {
      uid: pod.metadata.uid,
      name: pod.metadata.name,
      ip: podIp,
      netns,
      hostVeth,
      child,
      exited: new Promise((resolve) => child.on('exit', (code) => resolve(code))),
      ready: false,
      probeFailures: 0,
      probeSuccesses: 0,
      lastProbe: 0,
      terminating: false,
      stderr: '',
    };
    child.stderr!.on('data', (d: Buffer) => (running.stderr += d.toString()));
    child.stdout!.resume();
    // A container that ends by itself is a failure of the test's setup or of the webhook: say so at once.
    void running.exited.then((code) => {
      if (!running.terminating) this.failure ??= new Error(`pod ${running.name} exited ${code} by itself:\n${running.stderr}`);
    });
    this.pods.set(running.uid, running);
    this.record(running.name, 'started');
    await this.reportStatus(running, pod, false);
  }

  private envValue(e: k.Plain, pod: k.Plain, container: k.Plain, podIp: string): string {
    if (e.value !== undefined) return String(e.value);
    const field = e.valueFrom?.fieldRef?.fieldPath;
    if (field) {
      const fields: Record<string, string> = { 'metadata.name': pod.metadata.name, 'metadata.namespace': pod.metadata.namespace, 'status.podIP': podIp, 'spec.nodeName': this.node, 'spec.serviceAccountName': pod.spec.serviceAccountName };
      if (field in fields) return fields[field]!;
    }
    const resource = e.valueFrom?.resourceFieldRef;
    if (resource) {
      const [kind, name] = String(resource.resource).split('.');
      const value = container.resources?.[kind === 'limits' ? 'limits' : 'requests']?.[name!];
      if (value !== undefined) return String(quantity(String(value)) / quantity(String(resource.divisor ?? '1')));
    }
    throw new Error(`the fake kubelet cannot give env ${e.name} (${JSON.stringify(e.valueFrom)}): teach it`);
  }

  /** The pod's volumes as files: Secrets and ConfigMaps from the API server, emptyDirs empty. */
  private async volumes(pod: k.Plain, container: k.Plain, root: string): Promise<Map<string, string>> {
    const mounts = new Map<string, string>();
    for (const m of (container.volumeMounts ?? []) as k.Plain[]) {
      const volume = (pod.spec.volumes as k.Plain[]).find((v) => v.name === m.name)!;
      const dir = path.join(root, m.name);
      mkdirSync(dir, { recursive: true });
      let files: Record<string, Buffer> = {};
      if (volume.secret) {
        const secret = (await k.api('GET', `/api/v1/namespaces/${this.ns}/secrets/${volume.secret.secretName}`)).json();
        files = Object.fromEntries(Object.entries((secret.data ?? {}) as Record<string, string>).map(([key, v]) => [key, Buffer.from(v, 'base64')]));
      } else if (volume.configMap) {
        const cm = (await k.api('GET', `/api/v1/namespaces/${this.ns}/configmaps/${volume.configMap.name}`)).json();
        files = Object.fromEntries(Object.entries((cm.data ?? {}) as Record<string, string>).map(([key, v]) => [key, Buffer.from(v)]));
      } else if (volume.projected) {
        // The service account's volume the ServiceAccount admission plugin adds: a bound token, the cluster CA, the namespace.
        for (const source of volume.projected.sources as k.Plain[]) {
          if (source.serviceAccountToken) {
            const token = await k.api('POST', `/api/v1/namespaces/${this.ns}/serviceaccounts/${pod.spec.serviceAccountName}/token`, {
              apiVersion: 'authentication.k8s.io/v1',
              kind: 'TokenRequest',
              spec: { expirationSeconds: source.serviceAccountToken.expirationSeconds ?? 3607, boundObjectRef: { apiVersion: 'v1', kind: 'Pod', name: pod.metadata.name, uid: pod.metadata.uid } },
            });
            files[source.serviceAccountToken.path] = Buffer.from(token.json().status.token);
          } else if (source.configMap) {
            const cm = (await k.api('GET', `/api/v1/namespaces/${this.ns}/configmaps/${source.configMap.name}`)).json();
            for (const item of (source.configMap.items ?? []) as k.Plain[]) files[item.path] = Buffer.from(cm.data[item.key]);
          } else if (source.downwardAPI) {
            for (const item of source.downwardAPI.items as k.Plain[]) if (item.fieldRef?.fieldPath === 'metadata.namespace') files[item.path] = Buffer.from(this.ns);
          }
        }
      } else if (!volume.emptyDir) throw new Error(`the fake kubelet cannot mount volume ${m.name}: teach it`);
      for (const [name, content] of Object.entries(files)) writeFileSync(path.join(dir, name), content, { mode: 0o644 });
      // emptyDir and the others writable or readable by the pod's user, as fsGroup makes them.
      chmodSync(root, 0o755);
      chmodSync(dir, volume.emptyDir ? 0o1777 : 0o755);
      mounts.set(m.mountPath, dir);
    }
    return mounts;
  }

  private async probe(running: RunningPod, pod: k.Plain): Promise<void> {
    const probe = (pod.spec.containers[0] as k.Plain).readinessProbe;
    if (!probe?.httpGet) return;
    const now = Date.now();
    if (now - running.lastProbe < (probe.periodSeconds ?? 10) * 1000) return;
    running.lastProbe = now;
    const port = typeof probe.httpGet.port === 'number' ? probe.httpGet.port : (pod.spec.containers[0].ports as k.Plain[]).find((p) => p.name === probe.httpGet.port)!.containerPort;
    const ok = await httpProbe(probe.httpGet.scheme === 'HTTPS', running.ip, port, probe.httpGet.path, (probe.timeoutSeconds ?? 1) * 1000);
    if (ok) (running.probeSuccesses++, (running.probeFailures = 0));
    else (running.probeFailures++, (running.probeSuccesses = 0));
    const ready = running.ready ? running.probeFailures < (probe.failureThreshold ?? 3) : running.probeSuccesses >= (probe.successThreshold ?? 1);
    if (ready !== running.ready) {
      running.ready = ready;
      this.record(running.name, ready ? 'ready' : 'not ready');
      await this.reportStatus(running, pod, ready);
    }
  }

  private async reportStatus(running: RunningPod, pod: k.Plain, ready: boolean): Promise<void> {
    const now = new Date().toISOString();
    const condition = (type: string, status: boolean) => ({ type, status: status ? 'True' : 'False', lastTransitionTime: now });
    const container = pod.spec.containers[0] as k.Plain;
    await k.api(
      'PATCH',
      `/api/v1/namespaces/${this.ns}/pods/${running.name}/status`,
      {
        status: {
          phase: 'Running',
          hostIP: `${this.net}.1`,
          hostIPs: [{ ip: `${this.net}.1` }],
          podIP: running.ip,
          podIPs: [{ ip: running.ip }],
          startTime: pod.status?.startTime ?? now,
          conditions: [condition('PodScheduled', true), condition('Initialized', true), condition('ContainersReady', ready), condition('Ready', ready)],
          containerStatuses: [{ name: container.name, image: container.image, imageID: '', ready, restartCount: 0, started: true, state: { running: { startedAt: now } } }],
        },
      },
      { 'content-type': 'application/strategic-merge-patch+json' },
    );
  }

  /** The kubelet's termination: SIGTERM (no preStop hook here unless the chart has one), the grace period, SIGKILL; then the pod object goes. */
  private async terminate(running: RunningPod, pod: k.Plain | undefined): Promise<void> {
    running.terminating = true;
    this.record(running.name, 'terminating');
    const container = pod?.spec.containers[0] as k.Plain | undefined;
    const grace = (pod?.metadata.deletionGracePeriodSeconds ?? pod?.spec.terminationGracePeriodSeconds ?? 30) * 1000;
    const deadline = Date.now() + grace;
    const preStop = container?.lifecycle?.preStop;
    if (preStop?.sleep) await k.sleep(preStop.sleep.seconds * 1000);
    else if (preStop?.exec) spawnSync('ip', ['netns', 'exec', running.netns, ...preStop.exec.command], { timeout: grace });
    else if (preStop) throw new Error('the fake kubelet runs preStop sleep and exec hooks only: teach it');
    running.child.kill('SIGTERM');
    this.record(running.name, 'SIGTERM');
    const code = await Promise.race([running.exited, k.sleep(Math.max(0, deadline - Date.now())).then(() => 'grace period over' as const)]);
    if (code === 'grace period over') {
      running.child.kill('SIGKILL');
      await running.exited;
      this.record(running.name, 'SIGKILL');
    } else this.record(running.name, `exited ${code}`);
    this.removeNetwork(running);
    this.pods.delete(running.uid);
    if (pod) await k.api('DELETE', `/api/v1/namespaces/${this.ns}/pods/${running.name}`, { apiVersion: 'v1', kind: 'DeleteOptions', gracePeriodSeconds: 0, preconditions: { uid: running.uid } });
  }

  /** Network namespaces and links an earlier run of this test left behind (killed before its cleanup). */
  static removeStaleNetworks(): void {
    const namespaces = spawnSync('ip', ['netns', 'list'], { encoding: 'utf8' }).stdout;
    for (const line of namespaces.split('\n')) if (/^vpt-[a-z0-9]{4}-\d+/.test(line)) spawnSync('ip', ['netns', 'delete', line.split(' ')[0]!]);
    const links = spawnSync('ip', ['-o', 'link'], { encoding: 'utf8' }).stdout;
    for (const m of links.matchAll(/^\d+: (vph[a-z0-9]{4}\d+)[@:]/gm)) spawnSync('ip', ['link', 'delete', m[1]!]);
  }

  private removeNetwork(running: RunningPod): void {
    spawnSync('ip', ['netns', 'delete', running.netns]);
    spawnSync('ip', ['link', 'delete', running.hostVeth]);
  }

  /** SIGSTOP / SIGCONT a pod's process: a webhook that accepts connections and never answers. */
  freeze(name: string, frozen: boolean): void {
    const running = [...this.pods.values()].find((p) => p.name === name);
    if (!running) throw new Error(`no pod ${name}`);
    // ip netns exec, sh and setpriv each exec the next: the child's pid is node's.
    process.kill(running.child.pid!, frozen ? 'SIGSTOP' : 'SIGCONT');
  }

  runningPods(): { name: string; ip: string; ready: boolean }[] {
    return [...this.pods.values()].map((p) => ({ name: p.name, ip: p.ip, ready: p.ready }));
  }
}

function httpProbe(tls: boolean, host: string, port: number, urlPath: string, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    // The kubelet does not check the certificate of an HTTPS probe.
    const req = (tls ? https : http).request({ host, port, path: urlPath, method: 'GET', rejectUnauthorized: false, timeout: timeoutMs, agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode! >= 200 && res.statusCode! < 400));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(false));
    req.end();
  });
}

function quantity(q: string): number {
  const units: Record<string, number> = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, k: 1e3, M: 1e6, G: 1e9, T: 1e12, m: 1e-3 };
  const m = /^([0-9.]+)([A-Za-z]*)$/.exec(q);
  if (!m) throw new Error(`quantity ${q}`);
  return Number(m[1]) * (units[m[2]!] ?? 1);
}

/** The pods' addresses: RFC 5737 TEST-NET-3, unless this machine's own network uses it. */
function checkPodNetUnused(): void {
  const used = spawnSync('ip', ['-o', 'addr'], { encoding: 'utf8' }).stdout + spawnSync('ip', ['route'], { encoding: 'utf8' }).stdout;
  if (used.includes(`${k.POD_NET}.`)) throw new Error(`this machine's network already uses ${k.POD_NET}.0/24, the range the fake kubelet gives pods`);
}

/**
 * Shell commands that mount each volume (host directory) at its mountPath, then exec "$@". A mountPath
 * whose parent is missing on the host gets its nearest existing directory overlaid (overlayfs, the
 * upper layer in the pod's own directory), so the missing directories are made in the overlay only.
 */
function mountScript(mounts: Map<string, string>, overlays: string): string {
  const quote = (p: string) => `'${p.replaceAll("'", "'\\''")}'`;
  const lines: string[] = [];
  const overlaid = new Set<string>();
  // A mount over a directory that holds other volumes' host directories (the pod's /tmp over the host's) comes last.
  const shadows = (mountPath: string) => [...mounts.values()].some((dir) => dir.startsWith(`${realpathOf(mountPath)}/`));
  const ordered = [...mounts].sort(([a], [b]) => Number(shadows(a)) - Number(shadows(b)));
  for (const [mountPath, hostDir] of ordered) {
    let existing = mountPath;
    while (!existsSync(existing)) existing = path.dirname(existing);
    const real = realpathSync(existing);
    const target = path.join(real, path.relative(existing, mountPath));
    if (existing !== mountPath && !overlaid.has(real)) {
      if (real === '/') throw new Error(`the fake kubelet cannot make ${mountPath}: it would overlay /`);
      overlaid.add(real);
      // /run holds runtime state only, and a container has its own: a fresh tmpfs (overlayfs refuses it as a lower layer here).
      if (real === '/run') {
        lines.push(`mount -t tmpfs tmpfs /run`);
        lines.push(`mkdir -p ${quote(target)}`, `mount --bind ${quote(hostDir)} ${quote(target)}`);
        continue;
      }
      const upper = path.join(overlays, String(overlaid.size), 'upper');
      const work = path.join(overlays, String(overlaid.size), 'work');
      mkdirSync(upper, { recursive: true });
      mkdirSync(work, { recursive: true });
      lines.push(`mount -t overlay overlay -o lowerdir=${quote(real)},upperdir=${quote(upper)},workdir=${quote(work)} ${quote(real)}`);
    }
    lines.push(`mkdir -p ${quote(target)}`, `mount --bind ${quote(hostDir)} ${quote(target)}`);
  }
  return [...lines, 'exec "$@"'].join('\n');
}

/** The real path of a path whose tail may not exist yet. */
function realpathOf(p: string): string {
  let existing = p;
  while (!existsSync(existing)) existing = path.dirname(existing);
  return path.join(realpathSync(existing), path.relative(existing, p));
}
