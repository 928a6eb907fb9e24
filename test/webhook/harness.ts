/**
 * The webhook's tests talk to it as the API server does: over real TLS
 * (certificates made here by openssl, signed by a CA of the test), HTTP/1.1
 * through node:https and HTTP/2 through node:http2, with AdmissionReview v1
 * bodies. Returned patches are applied by an independent RFC 6902
 * implementation, Debian's python3-jsonpatch.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import http2 from 'node:http2';
import https from 'node:https';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseAllDocuments, stringify as stringifyYaml } from 'yaml';
import { transform } from '../../src/core/transform.js';
import { DEFAULT_OPTIONS, type Options } from '../../src/core/options.js';
import { DEFAULT_SETTINGS, startWebhook, type Webhook, type WebhookSettings } from '../../src/webhook/server.js';
import type { JsonPatchOperation } from '../../src/core/patch.js';
import { applyWithJsonpatch } from '../support/doors.js';

/** The tests need real tools; a missing one fails loudly instead of skipping. */
export function requireTools(): void {
  if (spawnSync('openssl', ['version']).status !== 0) throw new Error('webhook tests need openssl (Debian package openssl): run ./scripts/test.sh');
  if (spawnSync('python3', ['-c', 'import jsonpatch']).status !== 0) throw new Error('webhook tests need python3-jsonpatch (Debian package): run ./scripts/test.sh, which installs it');
}

export function tempDir(prefix: string): string {
  return mkdtempSync(path.join(tmpdir(), `vram-preflight-webhook-${prefix}-`));
}

export interface Pki {
  dir: string;
  caCert: string;
  /** Signs a new leaf for localhost/127.0.0.1 (a server's, or with `clientAuth` a client's); returns its cert and key paths. */
  leaf(name: string, usage?: 'serverAuth' | 'clientAuth'): { cert: string; key: string };
}

export function makePki(dir: string): Pki {
  mkdirSync(dir, { recursive: true });
  const caKey = path.join(dir, 'ca.key');
  const caCert = path.join(dir, 'ca.crt');
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  execFileSync('openssl', ['req', '-x509', ...ec, '-days', '2', '-keyout', caKey, '-out', caCert, '-subj', '/CN=vram-preflight test CA', '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign'], { stdio: 'pipe' });
  return {
    dir,
    caCert,
    leaf(name, usage = 'serverAuth') {
      const key = path.join(dir, `${name}.key`);
      const csr = path.join(dir, `${name}.csr`);
      const cert = path.join(dir, `${name}.crt`);
      const ext = path.join(dir, `${name}.ext`);
      writeFileSync(ext, `subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=${usage}\n`);
      execFileSync('openssl', ['req', '-new', ...ec, '-keyout', key, '-out', csr, '-subj', `/CN=${name}`], { stdio: 'pipe' });
      execFileSync('openssl', ['x509', '-req', '-in', csr, '-CA', caCert, '-CAkey', caKey, '-CAcreateserial', '-days', '2', '-extfile', ext, '-out', cert], { stdio: 'pipe' });
      return { cert, key };
    },
  };
}

/**
 * A Secret volume as the kubelet writes it: `tls.crt -> ..data/tls.crt`,
 * `..data -> ..<timestamp>`; an update writes a new timestamped directory
 * and swaps `..data` by a rename.
 */
export class SecretVolume {
  private generation = 0;

  constructor(readonly dir: string) {
    mkdirSync(dir, { recursive: true });
  }

  path(name: string): string {
    return path.join(this.dir, name);
  }

  write(files: Record<string, string>): void {
    const version = `..${Date.now()}_${++this.generation}`;
    mkdirSync(path.join(this.dir, version));
    for (const [name, text] of Object.entries(files)) writeFileSync(path.join(this.dir, version, name), text);
    const tmp = path.join(this.dir, '..data_tmp');
    symlinkSync(version, tmp);
    renameSync(tmp, path.join(this.dir, '..data'));
    for (const name of Object.keys(files)) {
      try {
        symlinkSync(path.join('..data', name), path.join(this.dir, name));
      } catch {
        // already linked
      }
    }
  }
}

export interface Started {
  webhook: Webhook;
  logs: Record<string, unknown>[];
  url: string;
}

export async function start(settings: Partial<WebhookSettings> & Pick<WebhookSettings, 'certFile' | 'keyFile'>): Promise<Started> {
  const logs: Record<string, unknown>[] = [];
  const webhook = await startWebhook({
    ...DEFAULT_SETTINGS,
    port: 0,
    address: '127.0.0.1',
    flags: [],
    env: { PATH: process.env.PATH },
    kubernetesCredentialsDir: '/nonexistent',
    log: (entry) => logs.push(entry),
    ...settings,
  });
  return { webhook, logs, url: `https://127.0.0.1:${webhook.port}` };
}

export interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  /** The protocol the connection negotiated. */
  alpn?: string;
}

export interface RequestOptions {
  method?: string;
  path?: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** A client certificate to present (the API server's, where the webhook asks for one). */
  client?: { cert: string; key: string };
  /** The name the certificate is checked against (and the SNI), where it is not the URL's host (a pod's address, its Service's name). */
  servername?: string;
}

/** HTTP/1.1 over TLS; pass an agent to keep connections alive. */
export function h1(url: string, ca: string, options: RequestOptions = {}, agent?: https.Agent): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      `${url}${options.path ?? '/mutate'}`,
      {
        method: options.method ?? 'POST',
        ca: readFileSync(ca),
        agent: agent ?? false,
        headers: { 'content-type': 'application/json', ...options.headers },
        ...(options.client ? { cert: readFileSync(options.client.cert), key: readFileSync(options.client.key) } : {}),
        ...(options.servername ? { servername: options.servername } : {}),
        // As the API server's client offers it when it speaks HTTP/1.1.
        ...({ ALPNProtocols: ['http/1.1'] } as object),
      },
      (res) => {
        const alpn = (res.socket as import('node:tls').TLSSocket).alpnProtocol || undefined;
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks).toString('utf8'), alpn }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}

/** One HTTP/2 session; `request` sends a stream on it. */
export function h2session(url: string, ca: string): { request(options?: RequestOptions): Promise<Answer>; close(): void; session: http2.ClientHttp2Session } {
  const session = http2.connect(url, { ca: readFileSync(ca) });
  session.on('error', () => {});
  return {
    session,
    close: () => session.close(),
    request: (options = {}) =>
      new Promise((resolve, reject) => {
        const stream = session.request({
          ':method': options.method ?? 'POST',
          ':path': options.path ?? '/mutate',
          'content-type': 'application/json',
          ...options.headers,
        });
        let headers: http2.IncomingHttpHeaders = {};
        const chunks: Buffer[] = [];
        stream.on('response', (h) => (headers = h));
        stream.on('data', (c: Buffer) => chunks.push(c));
        stream.on('end', () => resolve({ status: Number(headers[':status']), headers, body: Buffer.concat(chunks).toString('utf8'), alpn: session.alpnProtocol }));
        stream.on('error', reject);
        stream.end(options.body);
      }),
  };
}

let uidCounter = 0;

export interface ReviewOptions {
  operation?: string;
  dryRun?: boolean;
  kind?: { group: string; version: string; kind: string };
  resource?: { group: string; version: string; resource: string };
  namespace?: string;
  uid?: string;
}

/** An AdmissionReview as the API server sends it for a pod. */
export function review(pod: unknown, options: ReviewOptions = {}): string {
  const uid = options.uid ?? `00000000-0000-4000-8000-${String(++uidCounter).padStart(12, '0')}`;
  const request: Record<string, unknown> = {
    uid,
    kind: options.kind ?? { group: '', version: 'v1', kind: 'Pod' },
    resource: options.resource ?? { group: '', version: 'v1', resource: 'pods' },
    requestKind: options.kind ?? { group: '', version: 'v1', kind: 'Pod' },
    requestResource: options.resource ?? { group: '', version: 'v1', resource: 'pods' },
    namespace: options.namespace ?? 'models',
    operation: options.operation ?? 'CREATE',
    userInfo: { username: 'system:serviceaccount:kube-system:replicaset-controller', groups: ['system:serviceaccounts'] },
    object: pod,
    oldObject: null,
    dryRun: options.dryRun ?? false,
    options: { apiVersion: 'meta.k8s.io/v1', kind: 'CreateOptions' },
  };
  if (pod === undefined) delete request.object;
  return JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request });
}

export interface ReviewAnswer {
  uid: string;
  allowed: boolean;
  patchType?: string;
  patch?: unknown[];
  warnings?: string[];
}

/** The response of an AdmissionReview answer, its patch decoded. */
export function readReview(answer: Answer): ReviewAnswer {
  const body = JSON.parse(answer.body) as { apiVersion: string; kind: string; response: Record<string, unknown> };
  if (body.apiVersion !== 'admission.k8s.io/v1' || body.kind !== 'AdmissionReview') throw new Error(`not an AdmissionReview: ${answer.body.slice(0, 200)}`);
  const r = body.response;
  return {
    uid: r.uid as string,
    allowed: r.allowed as boolean,
    patchType: r.patchType as string | undefined,
    patch: typeof r.patch === 'string' ? (JSON.parse(Buffer.from(r.patch, 'base64').toString('utf8')) as unknown[]) : undefined,
    warnings: r.warnings as string[] | undefined,
  };
}

/** Applies an RFC 6902 patch with python3-jsonpatch (not our code). */
export function applyPatch(document: unknown, patch: unknown[]): unknown {
  return applyWithJsonpatch([{ pod: document, patch: patch as JsonPatchOperation[] }])[0];
}

/** What the post-renderer makes of a pod: the same object through `transform`, read back as JSON. */
export function postRendered(pod: unknown, options: Options = DEFAULT_OPTIONS): { object: unknown; errors: string[] } {
  const { objects, errors } = postRenderedStream([pod], options);
  return { object: objects[0], errors };
}

/** The same for a render of several objects (one YAML stream). */
export function postRenderedStream(objects: unknown[], options: Options = DEFAULT_OPTIONS): { objects: unknown[]; errors: string[] } {
  const result = transform(objects.map((o) => `---\n${stringifyYaml(o)}`).join(''), options);
  return { objects: parseAllDocuments(result.pieces.join('')).map((d) => d.toJS()), errors: result.errors.map((e) => e.format()) };
}

export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

export type Pod = {
  apiVersion: 'v1';
  kind: 'Pod';
  metadata: Record<string, unknown>;
  spec: { containers: Record<string, unknown>[]; [key: string]: unknown };
};

/** A pod as a ReplicaSet controller creates it: generateName, labels, a vLLM container on one GPU (or `containers`). */
export function vllmPod(over: { name?: string; annotations?: Record<string, string>; containers?: Record<string, unknown>[]; spec?: Record<string, unknown> } = {}): Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      generateName: `${over.name ?? 'qwen'}-7d9f8c6b5-`,
      namespace: 'models',
      labels: { app: over.name ?? 'qwen', 'pod-template-hash': '7d9f8c6b5' },
      ...(over.annotations ? { annotations: over.annotations } : {}),
      ownerReferences: [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: `${over.name ?? 'qwen'}-7d9f8c6b5`, uid: 'b1c2', controller: true, blockOwnerDeletion: true }],
    },
    spec: {
      containers: over.containers ?? [
        {
          name: 'model',
          image: 'vllm/vllm-openai:v0.10.1',
          args: ['--model', 'Qwen/Qwen3-8B', '--gpu-memory-utilization', '0.9'],
          resources: { limits: { 'nvidia.com/gpu': '1' }, requests: { 'nvidia.com/gpu': '1' } },
          terminationMessagePath: '/dev/termination-log',
          terminationMessagePolicy: 'File',
          imagePullPolicy: 'IfNotPresent',
        },
      ],
      restartPolicy: 'Always',
      terminationGracePeriodSeconds: 30,
      dnsPolicy: 'ClusterFirst',
      serviceAccountName: 'default',
      schedulerName: 'default-scheduler',
      ...over.spec,
    },
  };
}

/** A pod with nothing to wrap. */
export function plainPod(): Pod {
  return vllmPod({ name: 'web', containers: [{ name: 'nginx', image: 'nginx:1.27', ports: [{ containerPort: 80 }] }] });
}
