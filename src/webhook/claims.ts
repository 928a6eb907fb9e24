/**
 * DRA: which device classes a pod's ResourceClaims and ResourceClaimTemplates
 * request. A pod only names them; the objects live in the cluster, so the
 * webhook reads them through the Kubernetes API (RBAC: get on
 * resourceclaims and resourceclaimtemplates) and hands the core what a render
 * would have held (recordDeviceClaim). Reads are cached for a short while and
 * have a small budget of their own; a claim that cannot be read leaves its
 * container unwrapped, with the reason.
 *
 * In-cluster access as every client does it: KUBERNETES_SERVICE_HOST/PORT,
 * and the service account's token, CA and namespace files (the token is read
 * again for each request: the kubelet rotates it).
 */
import { readFileSync } from 'node:fs';
import { Agent, request } from 'node:https';
import { emptyDeviceClaims, recordDeviceClaim, type DeviceClaims } from '../core/tables/gpu.js';
import type { WebhookMetrics } from './metrics.js';

export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/** resource.k8s.io versions, newest first: v1 (Kubernetes 1.34), v1beta2 (1.33), v1beta1 (1.32). */
const VERSIONS = ['v1', 'v1beta2', 'v1beta1'];

export interface ClaimReference {
  kind: 'ResourceClaim' | 'ResourceClaimTemplate';
  name: string;
}

export interface ClaimReadResult {
  claims: DeviceClaims;
  /** `ResourceClaimTemplate x` → why it could not be read. */
  failures: Map<string, string>;
}

export interface ClaimReaderSettings {
  /** https://host:port of the API server. */
  apiServer: string;
  credentialsDir: string;
  budgetMs: number;
  ttlMs: number;
  failureTtlMs: number;
}

type Read = { object: Record<string, unknown> } | { error: string };

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** The API server's address in a pod, or undefined outside a cluster. */
export function inClusterApiServer(env: Readonly<Record<string, string | undefined>>): string | undefined {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  if (!host || !port) return undefined;
  return `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
}

export class ClaimReader {
  private readonly cache = new Map<string, { read: Read; expires: number }>();
  private readonly inFlight = new Map<string, Promise<Read>>();
  private agent: Agent | undefined;
  private caText: string | undefined;
  /** The version the API server answered last, tried first. */
  private version = VERSIONS[0]!;

  constructor(
    private readonly settings: ClaimReaderSettings,
    private readonly metrics: WebhookMetrics,
    private readonly now: () => number = Date.now,
  ) {}

  /** Device classes of each claim a pod in `namespace` names, within the budget; never throws. */
  async read(namespace: string, references: readonly ClaimReference[]): Promise<ClaimReadResult> {
    const claims = emptyDeviceClaims();
    const failures = new Map<string, string>();
    let timer: NodeJS.Timeout | undefined;
    const budget = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), this.settings.budgetMs)));
    await Promise.all(
      references.map(async (ref) => {
        const label = `${ref.kind} ${ref.name}`;
        const read = await Promise.race([this.readOne(namespace, ref), budget]);
        if (read === 'timeout') failures.set(label, `the Kubernetes API did not answer within ${this.settings.budgetMs} ms`);
        else if ('error' in read) failures.set(label, read.error);
        else recordDeviceClaim(claims, read.object);
      }),
    );
    clearTimeout(timer);
    return { claims, failures };
  }

  private readOne(namespace: string, ref: ClaimReference): Promise<Read> {
    const key = `${namespace}/${ref.kind}/${ref.name}`;
    const cached = this.cache.get(key);
    if (cached && cached.expires > this.now()) {
      this.metrics.claimReads.inc({ result: 'hit' });
      return Promise.resolve(cached.read);
    }
    let promise = this.inFlight.get(key);
    if (promise) return promise;
    promise = this.fetch(namespace, ref).then((read) => {
      this.inFlight.delete(key);
      this.metrics.claimReads.inc({ result: 'error' in read ? 'failed' : 'read' });
      this.cache.set(key, { read, expires: this.now() + ('error' in read ? this.settings.failureTtlMs : this.settings.ttlMs) });
      if (this.cache.size > 5000) this.cache.delete(this.cache.keys().next().value!);
      return read;
    });
    this.inFlight.set(key, promise);
    return promise;
  }

  private async fetch(namespace: string, ref: ClaimReference): Promise<Read> {
    const plural = ref.kind === 'ResourceClaim' ? 'resourceclaims' : 'resourceclaimtemplates';
    const versions = [this.version, ...VERSIONS.filter((v) => v !== this.version)];
    let notFound = 0;
    for (const version of versions) {
      try {
        const object = await this.get(`/apis/resource.k8s.io/${version}/namespaces/${encodeURIComponent(namespace)}/${plural}/${encodeURIComponent(ref.name)}`);
        this.version = version;
        // Older versions answer without kind when asked through a list; a GET has it, but be sure.
        return { object: { ...object, kind: ref.kind } };
      } catch (error) {
        if (error instanceof HttpError && error.status === 404) {
          notFound++;
          continue;
        }
        return { error: `cannot read it from the Kubernetes API: ${(error as Error).message}` };
      }
    }
    return { error: notFound === versions.length ? `not found in namespace ${namespace} (resource.k8s.io ${VERSIONS.join(', ')})` : 'cannot read it from the Kubernetes API' };
  }

  private get(path: string): Promise<Record<string, unknown>> {
    const dir = this.settings.credentialsDir;
    let token: string;
    let ca: string;
    try {
      token = readFileSync(`${dir}/token`, 'utf8').trim();
      ca = readFileSync(`${dir}/ca.crt`, 'utf8');
    } catch (error) {
      return Promise.reject(new Error(`service account credentials unreadable (${(error as NodeJS.ErrnoException).code ?? String(error)})`));
    }
    if (ca !== this.caText || !this.agent) {
      this.agent?.destroy();
      this.agent = new Agent({ keepAlive: true, ca, maxSockets: 8 });
      this.caText = ca;
    }
    const url = new URL(path, this.settings.apiServer);
    return new Promise((resolve, reject) => {
      const req = request(url, { agent: this.agent, headers: { Authorization: `Bearer ${token}`, Accept: 'application/json' }, timeout: this.settings.budgetMs }, (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > 1 << 20) req.destroy(new Error('answer larger than 1 MiB'));
          else chunks.push(chunk);
        });
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          if (res.statusCode !== 200) {
            let message = '';
            try {
              message = String((JSON.parse(text) as { message?: unknown }).message ?? '');
            } catch {
              // not a Status object
            }
            reject(new HttpError(res.statusCode ?? 0, `HTTP ${res.statusCode}${message ? `: ${message.slice(0, 160)}` : ''}`));
            return;
          }
          try {
            resolve(JSON.parse(text) as Record<string, unknown>);
          } catch {
            reject(new Error('the answer is not JSON'));
          }
        });
        res.on('error', reject);
      });
      req.on('timeout', () => req.destroy(new Error(`no answer within ${this.settings.budgetMs} ms`)));
      req.on('error', reject);
      req.end();
    });
  }

  close(): void {
    this.agent?.destroy();
  }
}
