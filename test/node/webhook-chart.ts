/**
 * The webhook's own chart on the test cluster's node (test/README.md): its
 * image as the release builds it (scripts/build-image.sh, from the bundle of
 * this checkout), imported into the node's containerd under the name the
 * chart gives it, so that `helm install` of deploy/webhook with its defaults
 * runs real containers there: runc, the chart's securityContext (uid 65532,
 * read-only root filesystem), its memory limit in the kernel's cgroup, its
 * probes run by the kubelet, its Service led to the ready pods by the real
 * kube-proxy (iptables). Used by test/apiserver/service.test.ts and
 * scripts/bench/apiserver.ts.
 *
 * The image is built once per content: the archive is kept in
 * .cache/webhook-image under a hash of its inputs (the bundle, build-image.sh,
 * the Containerfile), so a run whose source did not change imports the same
 * bytes again (the build is reproducible: test/image checks it) without
 * building (10 s on 2 cores); the import itself takes a second or two.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as k from '../apiserver/harness.js';
import { node } from './harness.js';

const CACHE = path.join(k.ROOT, '.cache/webhook-image');

export interface WebhookImage {
  /** The name the chart gives the image (its values' repository, its appVersion as the tag). */
  ref: string;
  archive: string;
  /** The image manifest's digest (what `skopeo inspect` prints for the archive). */
  digest: string;
  /** The image config's digest: the kubelet's imageID of a container run from it. */
  configDigest: string;
}

function run(command: string, args: readonly string[], options: { env?: NodeJS.ProcessEnv; timeout?: number } = {}): string {
  const r = spawnSync(command, [...args], { encoding: 'utf8', env: options.env ?? process.env, timeout: options.timeout ?? 120_000, maxBuffer: 1 << 26 });
  if (r.status !== 0) throw new Error(`${command} ${args.join(' ')} exited ${r.status ?? r.signal}:\n${r.stderr}${r.error ? `\n${r.error.message}` : ''}`);
  return r.stdout;
}

/** ctr of the node's containerd, in the kubelet's namespace (k8s.io). */
export function ctr(args: readonly string[]): string {
  const n = node();
  return run(path.join(k.cluster().bin, 'ctr'), ['--address', n.containerd, '-n', 'k8s.io', ...args]);
}

/**
 * The release's webhook image in the node's containerd, under the chart's image name: built from
 * the bundle of this checkout (once per content), imported, tagged. `dir`: a temporary directory of
 * the caller's, for the bundle.
 */
export function webhookImage(dir: string): WebhookImage {
  node();
  const bundle = path.dirname(k.buildBundle(dir));
  const inputs = [...readdirSync(bundle).filter((f) => /^vram-preflight\..*(cjs|js)$/.test(f)).sort().map((f) => path.join(bundle, f)), path.join(k.ROOT, 'scripts/build-image.sh'), path.join(k.ROOT, 'deploy/webhook/Containerfile')];
  const hash = createHash('sha256');
  for (const file of inputs) hash.update(`${path.basename(file)}\0`).update(readFileSync(file));
  const archive = path.join(CACHE, `vram-preflight-webhook-${hash.digest('hex').slice(0, 16)}.oci.tar`);
  if (!statSync(archive, { throwIfNoEntry: false })) {
    mkdirSync(CACHE, { recursive: true });
    // One archive kept: the last one built.
    for (const f of readdirSync(CACHE)) rmSync(path.join(CACHE, f), { force: true });
    run('bash', [path.join(k.ROOT, 'scripts/build-image.sh'), 'webhook'], { env: { ...process.env, DIST_DIR: bundle, IMAGE_OUT: archive }, timeout: 300_000 });
  }
  const index = JSON.parse(run('tar', ['-xOf', archive, 'index.json'])) as k.Plain;
  const digest = index.manifests[0].digest as string;
  const manifest = JSON.parse(run('tar', ['-xOf', archive, `blobs/sha256/${digest.slice('sha256:'.length)}`])) as k.Plain;
  const configDigest = manifest.config.digest as string;
  const deployment = k.renderChart('vram-preflight', 'vram-preflight').find((o) => o.kind === 'Deployment')!;
  const ref = deployment.spec.template.spec.containers[0].image as string;
  const listed = () => ctr(['images', 'ls']).split('\n').slice(1).map((line) => line.split(/\s+/)).filter((cols) => cols.length > 2);
  if (!listed().some(([name, , d]) => name === ref && d === digest)) {
    // The archive names the image by its OCI ref name alone (vram-preflight-webhook:VERSION), which ctr would
    // store as it is, a name the kubelet's runtime normalizes (docker.io/library/…) and then cannot find. So
    // that name is filtered out (--base-name: only names of the chart's repository), the image is named by
    // its digest in that repository (--digests), and tagged as the chart names it.
    const repository = ref.slice(0, ref.lastIndexOf(':'));
    ctr(['images', 'import', '--local', '--base-name', repository, '--digests', archive]);
    ctr(['images', 'tag', '--force', `${repository}@${digest}`, ref]);
    if (!listed().some(([name, , d]) => name === ref && d === digest)) throw new Error(`ctr images import ${archive}: no ${ref} of digest ${digest} in containerd afterwards:\n${ctr(['images', 'ls'])}`);
  }
  return { ref, archive, digest, configDigest };
}

/** Helm 4 (the real binary, .cache/helm) with a HOME of its own and the admin's kubeconfig. */
export function helm(args: readonly string[]): string {
  const home = mkdtempSync(path.join(tmpdir(), 'vpt-helm-'));
  try {
    return run(path.join(k.ROOT, '.cache/helm/v4/helm'), args, {
      env: { PATH: process.env.PATH, HOME: home, HELM_CACHE_HOME: `${home}/c`, HELM_CONFIG_HOME: `${home}/f`, HELM_DATA_HOME: `${home}/d`, KUBECONFIG: k.cluster().kubeconfig },
    });
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}

export interface InstalledChart {
  release: string;
  namespace: string;
  objects: k.Plain[];
  deployment: string;
  replicas: number;
  /** label selector of the Deployment's pods */
  selector: string;
  service: string;
  /** The Service's DNS name, which the API server checks the certificate against (and sends as SNI). */
  serviceHost: string;
  /** The pods' HTTPS port (the container's). */
  containerPort: number;
  configuration: string;
  webhook: string;
}

/** `helm install` of deploy/webhook into `namespace` (which must take the node's pods: nodeNamespace), with the chart's defaults. */
export function installChart(release: string, namespace: string, values: readonly string[] = []): InstalledChart {
  helm(['install', release, path.join(k.ROOT, 'deploy/webhook'), '--namespace', namespace, ...values.flatMap((v) => ['--set', v])]);
  const objects = k.parseYamlStream(helm(['get', 'manifest', release, '--namespace', namespace]));
  const deployment = objects.find((o) => o.kind === 'Deployment')!;
  const service = objects.find((o) => o.kind === 'Service')!;
  const mwc = objects.find((o) => o.kind === 'MutatingWebhookConfiguration')!;
  const port = (deployment.spec.template.spec.containers[0].ports as k.Plain[]).find((p) => p.name === 'https')!;
  return {
    release,
    namespace,
    objects,
    deployment: deployment.metadata.name,
    replicas: deployment.spec.replicas,
    selector: Object.entries(deployment.spec.selector.matchLabels as Record<string, string>).map(([key, v]) => `${key}=${v}`).join(','),
    service: service.metadata.name,
    serviceHost: `${service.metadata.name}.${namespace}.svc`,
    containerPort: port.containerPort,
    configuration: mwc.metadata.name,
    webhook: mwc.webhooks[0].name,
  };
}

export interface WebhookPod {
  name: string;
  uid: string;
  ip: string | undefined;
  ready: boolean;
  terminating: boolean;
  restarts: number;
  /** containerd's id of the webhook container (without containerd://) */
  containerId: string | undefined;
  imageID: string | undefined;
  lastState: k.Plain | undefined;
  state: k.Plain | undefined;
}

/** The chart's pods as the API server has them now (the kubelet's status). */
export async function webhookPods(chart: InstalledChart): Promise<WebhookPod[]> {
  const res = await k.api('GET', `/api/v1/namespaces/${chart.namespace}/pods?labelSelector=${encodeURIComponent(chart.selector)}`);
  if (res.status !== 200) throw new Error(`pods: ${res.status} ${res.text.slice(0, 200)}`);
  return (res.json().items as k.Plain[]).map((pod) => {
    const status = ((pod.status?.containerStatuses ?? []) as k.Plain[]).find((s) => s.name === 'webhook');
    return {
      name: pod.metadata.name,
      uid: pod.metadata.uid,
      ip: pod.status?.podIP,
      ready: Boolean(status?.ready),
      terminating: Boolean(pod.metadata.deletionTimestamp),
      restarts: status?.restartCount ?? 0,
      containerId: status?.containerID ? String(status.containerID).replace(/^containerd:\/\//, '') : undefined,
      imageID: status?.imageID,
      lastState: status?.lastState,
      state: status?.state,
    };
  });
}

/** The ready endpoints the EndpointSlice controller publishes for the chart's Service. */
export async function readyEndpoints(chart: InstalledChart): Promise<string[]> {
  const res = await k.api('GET', `/apis/discovery.k8s.io/v1/namespaces/${chart.namespace}/endpointslices?labelSelector=${encodeURIComponent(`kubernetes.io/service-name=${chart.service}`)}`);
  if (res.status !== 200) throw new Error(`endpointslices: ${res.status} ${res.text.slice(0, 200)}`);
  const slices = res.json().items as k.Plain[];
  return slices.flatMap((s) => ((s.endpoints ?? []) as k.Plain[]).filter((e) => e.conditions?.ready).map((e) => e.addresses[0] as string));
}

/** The pid (on this machine) of a container's first process: runc's task, as containerd has it. */
export function containerPid(containerId: string): number {
  const line = ctr(['tasks', 'ls']).split('\n').find((l) => l.startsWith(`${containerId} `));
  if (!line) throw new Error(`no task ${containerId} in the node's containerd`);
  return Number(line.trim().split(/\s+/)[1]);
}

/**
 * A webhook that accepts connections and never answers: the container's processes frozen
 * (containerd's task pause: the cgroup freezer), or thawed. The kernel still completes TCP
 * handshakes on its listening socket; nothing reads them.
 */
export function freeze(containerId: string, frozen: boolean): void {
  ctr(['tasks', frozen ? 'pause' : 'resume', containerId]);
}

export interface CgroupMemory {
  /** the limit the kernel enforces, bytes */
  limit: number;
  /** what the cgroup is charged now, bytes */
  usage: number;
  /** the most the cgroup was charged (RSS, page cache, kernel memory), bytes */
  peak: number | undefined;
  /** times the cgroup hit its limit (v1's failcnt; v2's max events) */
  hitLimit: number;
  /** processes the kernel's OOM killer killed in it */
  oomKills: number;
}

function memoryCgroupDir(pid: number): { version: 1 | 2; dir: string } {
  const lines = readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n');
  const v1 = lines.find((l) => /^\d+:([^:]*,)?memory(,[^:]*)?:/.test(l));
  if (v1) return { version: 1, dir: path.join('/sys/fs/cgroup/memory', v1.slice(v1.indexOf(':', v1.indexOf(':') + 1) + 1)) };
  const v2 = lines.find((l) => l.startsWith('0::'));
  if (!v2) throw new Error(`no memory cgroup for pid ${pid}`);
  return { version: 2, dir: path.join('/sys/fs/cgroup', v2.slice(3)) };
}

/** Starts the cgroup's peak afresh (cgroup v1: memory.max_usage_in_bytes); false where the kernel cannot (v2). */
export function resetPeak(pid: number): boolean {
  const { version, dir } = memoryCgroupDir(pid);
  if (version !== 1) return false;
  writeFileSync(`${dir}/memory.max_usage_in_bytes`, '0');
  return true;
}

/** The memory cgroup of a process (cgroup v1 here, v2 elsewhere), as the kernel keeps it. */
export function cgroupMemory(pid: number): CgroupMemory {
  const read = (file: string) => readFileSync(file, 'utf8').trim();
  const field = (text: string, name: string) => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
  const { version, dir } = memoryCgroupDir(pid);
  if (version === 1) {
    return {
      limit: Number(read(`${dir}/memory.limit_in_bytes`)),
      usage: Number(read(`${dir}/memory.usage_in_bytes`)),
      peak: Number(read(`${dir}/memory.max_usage_in_bytes`)),
      hitLimit: Number(read(`${dir}/memory.failcnt`)),
      oomKills: field(read(`${dir}/memory.oom_control`), 'oom_kill'),
    };
  }
  const events = read(`${dir}/memory.events`);
  const peak = statSync(`${dir}/memory.peak`, { throwIfNoEntry: false }) ? Number(read(`${dir}/memory.peak`)) : undefined;
  return { limit: Number(read(`${dir}/memory.max`)), usage: Number(read(`${dir}/memory.current`)), peak, hitLimit: field(events, 'max'), oomKills: field(events, 'oom_kill') };
}

/** A process's peak resident memory (VmHWM), MiB. */
export function peakRssMiB(pid: number): number {
  return Number(/^VmHWM:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;
}

export interface Hello {
  src: string;
  dst: string;
  sni: string | null;
  alpn: string[] | null;
}

/**
 * The TLS ClientHellos sent to `port` on the node's bridge (the interface with the node's
 * address), read off the wire (test/node/clienthello.py): with the real kube-proxy the API
 * server's connections to a Service are NAT'd by the kernel, and only the wire shows what
 * it offered.
 */
export async function sniffClientHellos(port: number): Promise<{ hellos: Hello[]; stop: () => void }> {
  const n = node();
  const addr = run('ip', ['-o', '-4', 'addr', 'show']).split('\n').find((l) => l.includes(` ${n.ip}/`));
  if (!addr) throw new Error(`no interface holds the node's address ${n.ip}`);
  const iface = addr.split(/\s+/)[1]!;
  const child: ChildProcess = spawn('python3', [path.join(import.meta.dirname, 'clienthello.py'), iface, String(port)], { stdio: ['ignore', 'pipe', 'pipe'] });
  const hellos: Hello[] = [];
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  let pending = '';
  await new Promise<void>((resolve, reject) => {
    child.on('exit', (code) => reject(new Error(`clienthello.py exited ${code}: ${err}`)));
    child.stdout!.on('data', (d: Buffer) => {
      pending += d.toString();
      const lines = pending.split('\n');
      pending = lines.pop()!;
      for (const line of lines) {
        const entry = JSON.parse(line) as Hello & { listening?: string };
        if (entry.listening) resolve();
        else hellos.push(entry);
      }
    });
  });
  child.removeAllListeners('exit');
  return { hellos, stop: () => child.kill('SIGKILL') };
}
