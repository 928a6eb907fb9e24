/**
 * DRA: which device classes a pod's ResourceClaims and ResourceClaimTemplates
 * request. A pod only names them; the objects live in the cluster, so the
 * webhook reads them through the Kubernetes API (src/kubernetes: the one
 * client, its claim reads; RBAC: get on resourceclaims and
 * resourceclaimtemplates) and hands the core what a render would have held
 * (recordDeviceClaim). This module is the webhook's policy around those
 * reads: a budget per admission, a short cache, one read per claim, and a
 * bounded share of the API server.
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
 */
import { emptyDeviceClaims, recordDeviceClaim, type DeviceClaims } from '../core/tables/gpu.js';
import { readClaim, RESOURCE_API_VERSIONS, type ClaimReference, type KubernetesClient } from '../kubernetes/index.js';
import type { WebhookMetrics } from './metrics.js';

export type { ClaimReference };

export interface ClaimReadResult {
  claims: DeviceClaims;
  /** `ResourceClaimTemplate x` → why it could not be read. */
  failures: Map<string, string>;
}

export interface ClaimReaderSettings {
  budgetMs: number;
  ttlMs: number;
  failureTtlMs: number;
  /** Reads in flight in the process, at most. */
  maxInFlight: number;
}

/** The most of an answer a claim read takes: a ResourceClaim(Template) is small; more is not one. */
export const CLAIM_BODY_LIMIT = 1 << 20;

/** `transient`: no slot came within the budget; not an answer of the API server's, so not remembered. */
type Read = { object: Record<string, unknown> } | { error: string; transient?: true };

export class ClaimReader {
  private readonly cache = new Map<string, { read: Read; expires: number }>();
  private readonly inFlight = new Map<string, Promise<Read>>();
  private running = 0;
  /** Reads waiting for a slot, newest last (taken from the end). */
  private readonly waiting: (() => void)[] = [];
  /** The version the API server answered last, tried first. */
  private readonly versions = { preferred: RESOURCE_API_VERSIONS[0]! };

  constructor(
    private readonly client: KubernetesClient,
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
    const read = await readClaim(this.client, namespace, ref, this.versions, { deadline, maxBytes: CLAIM_BODY_LIMIT });
    // Said the same whichever timer saw it first (the pod's budget or the request's own).
    if ('error' in read && read.timedOut) return { error: this.noAnswer() };
    return read;
  }

  private noAnswer(): string {
    return `the Kubernetes API did not answer within ${this.settings.budgetMs} ms`;
  }

  close(): void {
    this.client.close();
  }
}
