/**
 * DRA: which device classes a pod's ResourceClaims and ResourceClaimTemplates
 * request. A pod only names them; the objects live in the cluster, so the
 * webhook reads them through the Kubernetes API (RBAC: get on
 * resourceclaims and resourceclaimtemplates) and hands the core what a render
 * would have held (recordDeviceClaim). Reads are cached for a short while and
 * have a small budget of their own; a claim that cannot be read leaves its
 * container unwrapped, with the reason.
 *
 * Bounded, so that a slow API server (or one pod naming thousands of
 * templates) never holds other pods' admissions: the admission reads at most
 * a few claims per pod (./admission.ts); one read per claim is in flight
 * however many pods name it; at most `maxInFlight` reads are in flight in the
 * process, the others wait for a slot (newest first: under a backlog the pod
 * that arrived last still has its budget left), each within the budget of
 * the pod that asked; a read that never got a slot is not remembered as a
 * failure, and a read in flight is abandoned at its deadline, queue time
 * included.
 *
 * In-cluster access as every client does it: KUBERNETES_SERVICE_HOST/PORT,
 * and the service account's token, CA and namespace files (the token is read
 * again for each request: the kubelet rotates it).
 */
import { readFileSync } from 'node:fs';
import { Agent, request } from 'node:https';
import { emptyDeviceClaims, recordDeviceClaim, type DeviceClaims } from '../core/index.js';
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
  /** Reads in flight in the process, at most (each on a kept-alive connection of its own). */
  maxInFlight: number;
}

/** `transient`: no slot came within the budget; not an answer of the API server's, so not remembered. */
type Read = { object: Record<string, unknown> } | { error: string; transient?: true };

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

/** A read abandoned at its deadline: said the same whichever timer saw it first (the pod's budget or the request's own). */
class DeadlineError extends Error {}

export class ClaimReader {
  private readonly cache = new Map<string, { read: Read; expires: number }>();
  private readonly inFlight = new Map<string, Promise<Read>>();
  private running = 0;
  /** Reads waiting for a slot, newest last (taken from the end). */
  private readonly waiting: (() => void)[] = [];
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
        if (read === 'timeout') failures.set(label, this.noAnswer());
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
    const deadline = Date.now() + this.settings.budgetMs;
    promise = this.withSlot(deadline, () => this.fetch(namespace, ref, deadline)).then((read) => {
      this.inFlight.delete(key);
      if ('transient' in read) {
        this.metrics.limits.inc({ limit: 'dra-queue-timeout' });
        return read;
      }
      this.metrics.claimReads.inc({ result: 'error' in read ? 'failed' : 'read' });
      this.cache.set(key, { read, expires: this.now() + ('error' in read ? this.settings.failureTtlMs : this.settings.ttlMs) });
      if (this.cache.size > 5000) this.cache.delete(this.cache.keys().next().value!);
      return read;
    });
    this.inFlight.set(key, promise);
    return promise;
  }

  /** Runs `read` once a slot is free, or answers a transient failure at `deadline` (epoch ms). */
  private async withSlot(deadline: number, read: () => Promise<Read>): Promise<Read> {
    if (this.running >= this.settings.maxInFlight) {
      const got = await new Promise<boolean>((resolve) => {
        const start = (): void => {
          clearTimeout(timer);
          resolve(true);
        };
        const timer = setTimeout(() => {
          this.waiting.splice(this.waiting.indexOf(start), 1);
          resolve(false);
        }, Math.max(0, deadline - Date.now()));
        this.waiting.push(start);
      });
      if (!got) return { error: `not read: ${this.settings.maxInFlight} reads were already in flight and none finished within ${this.settings.budgetMs} ms`, transient: true };
    }
    this.running++;
    try {
      return await read();
    } finally {
      this.running--;
      this.waiting.pop()?.();
    }
  }

  private async fetch(namespace: string, ref: ClaimReference, deadline: number): Promise<Read> {
    const plural = ref.kind === 'ResourceClaim' ? 'resourceclaims' : 'resourceclaimtemplates';
    const versions = [this.version, ...VERSIONS.filter((v) => v !== this.version)];
    let notFound = 0;
    for (const version of versions) {
      try {
        const object = await this.get(`/apis/resource.k8s.io/${version}/namespaces/${encodeURIComponent(namespace)}/${plural}/${encodeURIComponent(ref.name)}`, deadline);
        this.version = version;
        // Older versions answer without kind when asked through a list; a GET has it, but be sure.
        return { object: { ...object, kind: ref.kind } };
      } catch (error) {
        if (error instanceof HttpError && error.status === 404) {
          notFound++;
          continue;
        }
        if (error instanceof DeadlineError) return { error: this.noAnswer() };
        return { error: `cannot read it from the Kubernetes API: ${(error as Error).message}` };
      }
    }
    return { error: notFound === versions.length ? `not found in namespace ${namespace} (resource.k8s.io ${VERSIONS.join(', ')})` : 'cannot read it from the Kubernetes API' };
  }

  /** One GET, abandoned at `deadline` (epoch ms) wherever it is: waiting for a socket, connecting, or reading. */
  private get(path: string, deadline: number): Promise<Record<string, unknown>> {
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
      this.agent = new Agent({ keepAlive: true, ca, maxSockets: this.settings.maxInFlight });
      this.caText = ca;
    }
    const url = new URL(path, this.settings.apiServer);
    const left = deadline - Date.now();
    if (left <= 0) return Promise.reject(new DeadlineError(this.noAnswer()));
    return new Promise<Record<string, unknown>>((resolve, reject) => {
      const req = request(url, { agent: this.agent, headers: { Authorization: `Bearer ${token}`, Accept: 'application/json' } }, (res) => {
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
      // The whole exchange, not the socket's idleness (a `timeout` option would start only once a socket is assigned).
      const timer = setTimeout(() => req.destroy(new DeadlineError(this.noAnswer())), left);
      req.on('close', () => clearTimeout(timer));
      req.on('error', reject);
      req.end();
    });
  }

  private noAnswer(): string {
    return `the Kubernetes API did not answer within ${this.settings.budgetMs} ms`;
  }

  close(): void {
    this.agent?.destroy();
  }
}
