/**
 * The tests of this folder talk to a real Kubernetes control plane: etcd,
 * kube-apiserver and kube-controller-manager v1.37 built from their Go modules
 * by scripts/cluster.sh, on loopback, and the real kubectl of the same release.
 * The API server is the client of the webhook here: it picks the protocol,
 * checks the caBundle, applies the JSON Patch itself, validates the patched
 * pod, re-invokes, applies failurePolicy and timeoutSeconds, and records its
 * own metrics and audit annotations.
 *
 * One control plane serves every file (scripts/cluster.sh up is idempotent;
 * scripts/test.sh brings it up before vitest and down after). Files keep out
 * of each other's way by namespace and by a namespace label each file's
 * webhook configuration also requires (`vram-preflight.test/suite`).
 */
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseAllDocuments } from 'yaml';
import { startChild, type Child } from '../webhook/child.js';

export const ROOT = path.resolve(import.meta.dirname, '../..');

export type Plain = Record<string, any>;

/** The Services' cluster IPs of the test cluster (RFC 5737 TEST-NET-2, never routed: scripts/cluster.sh). */
export const SERVICE_NET = '198.51.100';

export interface Cluster {
  kubeconfig: string;
  /** The temporary directory of the running control plane (pki/, audit.log, logs). */
  dir: string;
  bin: string;
  api: string;
  caCert: string;
  /** Every variable `scripts/cluster.sh env` prints (the node's among them: test/node/harness.ts). */
  env: Record<string, string>;
}

let cached: Cluster | undefined;

/**
 * The running control plane; brings it up (building it the first time) when it is not.
 * Webhook configurations are cluster-wide: those an earlier file (or an interrupted run)
 * left behind would be called for this file's pods too, so each file starts without any.
 */
export function cluster(): Cluster {
  if (cached) return cached;
  const up = spawnSync('bash', [path.join(ROOT, 'scripts/cluster.sh'), 'up'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 40 * 60_000 });
  if (up.status !== 0) throw new Error(`scripts/cluster.sh up failed (it needs Go 1.26, openssl, curl):\n${up.stderr}`);
  const env = spawnSync('bash', [path.join(ROOT, 'scripts/cluster.sh'), 'env'], { encoding: 'utf8' });
  if (env.status !== 0) throw new Error(`scripts/cluster.sh env failed:\n${env.stderr}`);
  // A value is plain, or single-quoted for eval (each ' in it as '\'').
  const unquote = (v: string) => (v.startsWith("'") ? v.slice(1, -1).replaceAll("'\\''", "'") : v);
  const vars = Object.fromEntries(env.stdout.trim().split('\n').map((line) => [line.slice(0, line.indexOf('=')), unquote(line.slice(line.indexOf('=') + 1))]));
  cached = {
    kubeconfig: vars.KUBECONFIG!,
    dir: vars.VRAM_PREFLIGHT_CLUSTER_DIR!,
    bin: vars.VRAM_PREFLIGHT_CLUSTER_BIN!,
    api: vars.VRAM_PREFLIGHT_CLUSTER_API!,
    caCert: path.join(vars.VRAM_PREFLIGHT_CLUSTER_DIR!, 'pki/ca.crt'),
    env: vars,
  };
  kubectlOk(['delete', 'mutatingwebhookconfigurations,validatingwebhookconfigurations', '--all', '--wait=false']);
  return cached;
}

export interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

const asRun = (r: SpawnSyncReturns<string>): Run => ({ status: r.status, stdout: r.stdout, stderr: r.stderr });

/** The real kubectl of the cluster's release, with the admin kubeconfig (or another). */
export function kubectl(args: readonly string[], options: { input?: string; kubeconfig?: string; timeout?: number } = {}): Run {
  const c = cluster();
  return asRun(
    spawnSync(path.join(c.bin, 'kubectl'), [...args], {
      encoding: 'utf8',
      input: options.input,
      env: { PATH: process.env.PATH, HOME: tmpdir(), KUBECONFIG: options.kubeconfig ?? c.kubeconfig },
      maxBuffer: 1 << 28,
      timeout: options.timeout ?? 120_000,
    }),
  );
}

/** kubectl that must succeed; returns its stdout. */
export function kubectlOk(args: readonly string[], options: { input?: string; kubeconfig?: string } = {}): string {
  const run = kubectl(args, options);
  if (run.status !== 0) throw new Error(`kubectl ${args.join(' ')} exited ${run.status}:\n${run.stderr}`);
  return run.stdout;
}

export function applyObjects(objects: readonly unknown[], extra: readonly string[] = []): string {
  if (objects.length === 0) return '';
  return kubectlOk(['apply', '--server-side', '--force-conflicts', '--field-manager=vram-preflight-test', ...extra, '-f', '-'], { input: JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objects }) });
}

/** The client certificate of the admin (system:masters), for direct API calls. */
function adminTls(): { ca: Buffer; cert: Buffer; key: Buffer } {
  const c = cluster();
  return { ca: readFileSync(c.caCert), cert: readFileSync(path.join(c.dir, 'pki/admin.crt')), key: readFileSync(path.join(c.dir, 'pki/admin.key')) };
}

let agent: https.Agent | undefined;

/** One request to the API server as the admin; the body is JSON. */
export function api(method: string, urlPath: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; text: string; json: () => any; headers: Record<string, unknown> }> {
  agent ??= new https.Agent({ keepAlive: true, maxSockets: 32, ...adminTls() });
  const c = cluster();
  // Content-Length always: Node sends a DELETE's body without it (no chunked encoding by default for
  // DELETE), and the API server would read those bytes as the next request on the connection.
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = https.request(`${c.api}${urlPath}`, { method, agent, headers: { accept: 'application/json', ...(payload ? { 'content-type': 'application/json', 'content-length': String(payload.length) } : {}), ...headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (d: Buffer) => chunks.push(d));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        resolve({ status: res.statusCode!, text, json: () => JSON.parse(text), headers: res.headers });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(payload);
  });
}

export function closeApi(): void {
  agent?.destroy();
  agent = undefined;
}

/** The API server's own /metrics, parsed into samples. */
export async function apiserverMetrics(): Promise<{ name: string; labels: Record<string, string>; value: number }[]> {
  const res = await api('GET', '/metrics', undefined, { accept: 'text/plain' });
  if (res.status !== 200) throw new Error(`GET /metrics: ${res.status}`);
  const samples: { name: string; labels: Record<string, string>; value: number }[] = [];
  for (const line of res.text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!.replace(/\\(.)/g, '$1');
    samples.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return samples;
}

export function sumOf(samples: readonly { name: string; labels: Record<string, string>; value: number }[], name: string, labels: Record<string, string> = {}): number {
  return samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)).reduce((a, s) => a + s.value, 0);
}

/** The audit log's events (JSON lines), from a byte offset on. */
export function auditEvents(fromByte = 0): { events: Plain[]; end: number } {
  const text = readFileSync(path.join(cluster().dir, 'audit.log'));
  const events = text
    .subarray(fromByte)
    .toString('utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Plain);
  return { events, end: text.length };
}

export function auditLogSize(): number {
  return readFileSync(path.join(cluster().dir, 'audit.log')).length;
}

/** A namespace with labels; waits for its default service account (the ServiceAccount admission plugin needs it). */
export async function namespace(name: string, labels: Record<string, string>): Promise<string> {
  applyObjects([{ apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels } }]);
  for (let i = 0; i < 200; i++) {
    if ((await api('GET', `/api/v1/namespaces/${name}/serviceaccounts/default`)).status === 200) return name;
    await sleep(100);
  }
  throw new Error(`namespace ${name}: no default service account after 20 s (is kube-controller-manager running?)`);
}

export async function deleteNamespace(name: string): Promise<void> {
  await api('DELETE', `/api/v1/namespaces/${name}`);
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export function tempDir(prefix: string): string {
  return mkdtempSync(path.join(tmpdir(), `vram-preflight-apiserver-${prefix}-`));
}

export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/** A test CA and a serving certificate for 127.0.0.1 (the webhook's, as the API server checks it against caBundle). */
export function servingPki(dir: string, names: { ips?: string[]; dns?: string[] } = { ips: ['127.0.0.1'], dns: ['localhost'] }): { caCert: string; cert: string; key: string } {
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  const caKey = path.join(dir, 'ca.key');
  const caCert = path.join(dir, 'ca.crt');
  const run = (args: string[]) => {
    const r = spawnSync('openssl', args, { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`openssl ${args[0]}: ${r.stderr}`);
  };
  run(['req', '-x509', ...ec, '-days', '2', '-keyout', caKey, '-out', caCert, '-subj', '/CN=vram-preflight apiserver-test CA', '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign']);
  const key = path.join(dir, 'tls.key');
  const csr = path.join(dir, 'tls.csr');
  const cert = path.join(dir, 'tls.crt');
  const ext = path.join(dir, 'tls.ext');
  const san = [...(names.ips ?? []).map((ip) => `IP:${ip}`), ...(names.dns ?? []).map((d) => `DNS:${d}`)].join(',');
  writeFileSync(ext, `subjectAltName=${san}\nextendedKeyUsage=serverAuth\n`);
  run(['req', '-new', ...ec, '-keyout', key, '-out', csr, '-subj', '/CN=vram-preflight-webhook']);
  run(['x509', '-req', '-in', csr, '-CA', caCert, '-CAkey', caKey, '-CAcreateserial', '-days', '2', '-extfile', ext, '-out', cert]);
  return { caCert, cert, key };
}

/** Builds the bundle into a directory of the test (never racing dist/); returns the launcher's path. */
export function buildBundle(dir: string): string {
  const bundle = path.join(dir, 'dist/vram-preflight.cjs');
  const built = spawnSync(process.execPath, [path.join(ROOT, 'scripts/build.mjs'), '--outfile', bundle], { encoding: 'utf8' });
  if (built.status !== 0) throw new Error(built.stderr);
  return bundle;
}

export type WebhookProcess = Child;

/**
 * `vram-preflight webhook` as a process on 127.0.0.1 (test/webhook/child.ts starts it); resolves once it
 * prints `listening PORT`. No shutdown delay: these webhooks sit at a url, with no endpoint to leave
 * (service.test.ts runs the chart's, with its delay).
 */
export function startWebhook(bundle: string, tls: { cert: string; key: string }, args: readonly string[] = [], options: { env?: Record<string, string> } = {}): Promise<WebhookProcess> {
  return startChild(bundle, tls, ['--shutdown-delay-ms', '0', ...args], { env: { HOME: tmpdir(), ...options.env } });
}

/** SIGTERM, and its exit code. */
export async function stopWebhook(w: WebhookProcess | undefined): Promise<number | null> {
  if (!w) return null;
  if (w.child.exitCode === null) w.child.kill('SIGTERM');
  return w.exit;
}

/** A YAML stream as objects (empty documents dropped). */
export function parseYamlStream(text: string): Plain[] {
  return parseAllDocuments(text)
    .map((d) => d.toJS() as Plain)
    .filter(Boolean);
}

/** cert-manager's CRDs come from its Go module (deploy/crds), at this version. */
export const CERT_MANAGER_VERSION = 'v1.21.2';

/** The Prometheus Operator's CRDs come from its Go module (example/prometheus-operator-crd), at this version. */
export const PROMETHEUS_OPERATOR_VERSION = 'v0.85.0';

/**
 * The CustomResourceDefinitions a Go module ships as YAML files under a folder
 * (downloaded through the Go module proxy into the module cache; nothing is built).
 */
/** The directory of a Go module at a version, downloaded into the module cache when it is not there. */
export function goModuleDir(module: string, version: string): string {
  const r = spawnSync('go', ['mod', 'download', '-json', `${module}@${version}`], { encoding: 'utf8', cwd: tmpdir(), env: { ...process.env, GOFLAGS: '-mod=mod', GOTOOLCHAIN: 'local' } });
  if (r.status !== 0) throw new Error(`go mod download ${module}@${version}: ${r.stderr || r.stdout}`);
  return (JSON.parse(r.stdout) as { Dir: string }).Dir;
}

export function crdsOf(module: string, version: string, folder: string): Plain[] {
  const dir = path.join(goModuleDir(module, version), folder);
  return readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .sort()
    .flatMap((f) => parseYamlStream(readFileSync(path.join(dir, f), 'utf8')))
    .filter((o) => o.kind === 'CustomResourceDefinition');
}

/** Applies CRDs and waits until the API server serves each (Established). */
export async function establishCrds(crds: readonly Plain[]): Promise<void> {
  applyObjects(crds);
  for (const crd of crds) {
    for (let i = 0; ; i++) {
      const got = (await api('GET', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${crd.metadata.name}`)).json();
      if ((got.status?.conditions ?? []).some((c: Plain) => c.type === 'Established' && c.status === 'True')) break;
      if (i > 300) throw new Error(`${crd.metadata.name} not established`);
      await sleep(100);
    }
  }
}

/** Executables for running a container's start here: each name gets a /bin/sh script with that body. Returns their directory. */
export function fakeCommands(dir: string, commands: Record<string, string>): string {
  mkdirSync(dir);
  for (const [name, body] of Object.entries(commands)) {
    writeFileSync(path.join(dir, name), `#!/bin/sh\n${body}\n`);
    chmodSync(path.join(dir, name), 0o755);
  }
  return dir;
}

/** An nvidia-smi of one 80 GiB GPU (81559 MiB) that answers every --query-gpu field; `free` and `used` are shell words. */
export function fakeNvidiaSmi(free: string, used: string): string {
  return `fields=; for a in "$@"; do case $a in --query-gpu=*) fields=\${a#--query-gpu=} ;; esac; done
[ -n "$fields" ] || exit 0
out=; IFS=,; for f in $fields; do case $f in index) v=0 ;; uuid|gpu_uuid) v=GPU-0aaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee ;; memory.total) v=81559 ;; memory.free) v=${free} ;; memory.used) v=${used} ;; memory.reserved) v=0 ;; *) v='[N/A]' ;; esac; out=\${out:+$out, }$v; done
echo "$out"`;
}

/** The chart rendered by helm (v4 unless said), as objects. */
export function renderChart(release: string, namespace: string, values: readonly string[] = [], helmMajor: 3 | 4 = 4): Plain[] {
  const helm = path.join(ROOT, `.cache/helm/v${helmMajor}/helm`);
  const r = spawnSync(helm, ['template', release, path.join(ROOT, 'deploy/webhook'), '--namespace', namespace, ...values.flatMap((v) => ['--set', v])], { encoding: 'utf8', env: { PATH: process.env.PATH, HOME: tmpdir() } });
  if (r.status !== 0) throw new Error(`helm template: ${r.stderr}`);
  return parseYamlStream(r.stdout);
}

/**
 * The chart's MutatingWebhookConfiguration pointed at a webhook on loopback:
 * a `url` clientConfig (a Service cannot reach loopback) and the test's CA;
 * its rules, selectors, failurePolicy, timeoutSeconds, sideEffects,
 * reinvocationPolicy and matchPolicy are the chart's own. The namespace
 * selector gains one requirement, this file's suite label, so that files
 * sharing the control plane never call each other's webhooks.
 */
export function chartWebhookConfiguration(name: string, suite: string, url: string, caCert: string, options: { values?: readonly string[]; labels?: Record<string, string> } = {}): Plain {
  const mwc = renderChart('vram-preflight', 'vram-preflight', options.values).find((o) => o.kind === 'MutatingWebhookConfiguration');
  if (!mwc) throw new Error('the chart renders no MutatingWebhookConfiguration');
  mwc.metadata = { name, labels: { ...mwc.metadata.labels, ...options.labels } };
  for (const hook of mwc.webhooks as Plain[]) {
    hook.clientConfig = { url: `${url}/mutate`, caBundle: readFileSync(caCert).toString('base64') };
    hook.namespaceSelector = hook.namespaceSelector ?? {};
    hook.namespaceSelector.matchExpressions = [...(hook.namespaceSelector.matchExpressions ?? []), { key: 'vram-preflight.test/suite', operator: 'In', values: [suite] }];
  }
  return mwc;
}

/** The webhook's /metrics text. */
export function webhookMetrics(w: WebhookProcess, caCert: string): Promise<string> {
  return new Promise((resolve, reject) => {
    https
      .get(`${w.url}/metrics`, { ca: readFileSync(caCert) }, (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d.toString()));
        res.on('end', () => resolve(text));
      })
      .on('error', reject);
  });
}

/** AdmissionReviews the webhook answered, all outcomes (from its own /metrics). */
export async function admissionsAnswered(w: WebhookProcess, caCert: string): Promise<number> {
  const text = await webhookMetrics(w, caCert);
  return [...text.matchAll(/^vram_preflight_webhook_admissions_total\{[^}]*\} (\S+)$/gm)].reduce((a, m) => a + Number(m[1]), 0);
}

/**
 * Waits until the API server calls the webhook for this namespace: the
 * configuration reaches the admission plugin through an informer, shortly
 * after it is created. The probe is a server-side dry run of a vLLM pod
 * (nothing is stored), repeated until the webhook counts an answer.
 */
export async function waitForWebhook(ns: string, w: WebhookProcess, caCert: string): Promise<void> {
  const probe = vllmPod('probe');
  for (let i = 0; i < 300; i++) {
    const before = await admissionsAnswered(w, caCert);
    await api('POST', `/api/v1/namespaces/${ns}/pods?dryRun=All`, probe);
    if ((await admissionsAnswered(w, caCert)) > before) return;
    await sleep(100);
  }
  throw new Error(`the webhook was not called for namespace ${ns} within 30 s`);
}

/** A plain vLLM pod on one NVIDIA GPU (the start in command, so no image lookup is needed). */
export function vllmPod(name: string, extra: { labels?: Record<string, string>; utilization?: string } = {}): Plain {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels: { app: 'vllm', ...extra.labels } },
    spec: {
      containers: [
        {
          name: 'vllm',
          image: 'vllm/vllm-openai:v0.11.0',
          command: ['vllm', 'serve', 'Qwen/Qwen3-0.6B', '--gpu-memory-utilization', extra.utilization ?? '0.9'],
          resources: { limits: { 'nvidia.com/gpu': '1' } },
        },
      ],
    },
  };
}

export function isWrapped(container: Plain | undefined): boolean {
  return Array.isArray(container?.command) && container.command[0] === '/bin/sh' && String(container.args?.[0] ?? '').startsWith('# vram-preflight ');
}
