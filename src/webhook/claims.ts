/**
 * DRA: which device classes a pod's ResourceClaims and ResourceClaimTemplates
 * request. A pod only names them; the objects live in the cluster, so the
 * webhook reads them through the Kubernetes API (src/kubernetes: the one
 * client, its claim reads; RBAC: get on resourceclaims and
 * resourceclaimtemplates) and hands the core what a render would have held
 * (recordDeviceClaim). This module is the webhook's policy around those
 * reads: a budget per admission, a short cache, one read per claim, and a
 * bounded, fair share of the API server.
 *
 * Bounded, so that a slow API server (or one pod naming thousands of
 * templates) never holds other pods' admissions: the admission reads at most
 * a few claims per pod (./admission.ts); one read per claim is in flight
 * however many pods name it; at most `maxInFlight` reads are in flight in the
 * process, each within the budget of the pod that asked, its time waiting
 * for a slot included; a read that never got a slot is not remembered as a
 * failure.
 *
 * Fair, so that reads the API server never answers cannot starve one it
 * answers at once: a slot that frees goes in turn to the read that came last
 * (it has its whole budget left) and to the one that waited longest (so that
 * none waits for ever behind newer ones), and while any wait, a read holds
 * its slot for its share of the budget only (a
 * quarter of the budget, split among the reads running and waiting; never
 * under MIN_SHARE_MS), counted from when its request went out, then gives it
 * up, failing without being remembered. So each waiting read gets a slot
 * within about a quarter of its budget, however many hung reads came before
 * it (more where MIN_SHARE_MS holds: 16 slots turn over every 200 ms), and
 * has the rest for its own answer; with none
 * waiting, a read may take its whole budget. Over HTTP/2 (the API server's
 * own protocol) a read given up is a stream reset; over HTTP/1.1 it costs its
 * connection.
 */
import { type DeviceClaims, emptyDeviceClaims, recordDeviceClaim } from '../core/index.js';
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
  /** Reads in flight in the process, at most (each on a kept-alive connection of its own). */
  maxInFlight: number;
}

/** The most of an answer a claim read takes: a ResourceClaim(Template) is small; more is not one. */
export const CLAIM_BODY_LIMIT = 1 << 20;

/** The least time a read keeps its slot while others wait, once sent (an API server's GET of a small object takes a few ms; this leaves room for a loaded one, and for this process's own event loop). */
export const MIN_SHARE_MS = 200;

/** `transient`: the API server gave no answer because the reads' bounds ended it (no slot, or its share was up): not remembered. */
type Read = { object: Record<string, unknown> } | { error: string; transient?: 'queue' | 'share' };

/** A read that holds a slot. */
interface Running {
  /** When its request went out on an open connection (its share runs from then); absent: still connecting. */
  sent?: number;
  stop: AbortController;
}

/** A read waiting for a slot. */
interface Waiting {
  start: () => void;
}

/** Why a read gave its slot up: said as the read's failure. */
class ShareEnded extends Error {}

export class ClaimReader {
  private readonly cache = new Map<string, { read: Read; expires: number }>();
  private readonly inFlight = new Map<string, Promise<Read>>();
  private readonly running = new Set<Running>();
  /** Reads waiting for a slot, in the order they came. */
  private readonly waiting: Waiting[] = [];
  /** Which end of `waiting` the next free slot goes to: the newest, or the longest waiting. */
  private newestNext = true;
  private shareTimer: NodeJS.Timeout | undefined;
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
    promise = this.withSlot(deadline, (slot) => this.fetch(namespace, ref, deadline, slot)).then((read) => {
      this.inFlight.delete(key);
      if ('transient' in read) {
        this.metrics.limits.inc({ limit: read.transient === 'queue' ? 'dra-queue-timeout' : 'dra-share-ended' });
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
  private async withSlot(deadline: number, read: (slot: Running) => Promise<Read>): Promise<Read> {
    if (this.running.size >= this.settings.maxInFlight) {
      const got = await new Promise<boolean>((resolve) => {
        const waiter: Waiting = {
          start: () => {
            clearTimeout(timer);
            resolve(true);
          },
        };
        const timer = setTimeout(() => {
          this.waiting.splice(this.waiting.indexOf(waiter), 1);
          resolve(false);
        }, Math.max(0, deadline - Date.now()));
        this.waiting.push(waiter);
        this.rebalance();
      });
      if (!got) return { error: `not read: ${this.settings.maxInFlight} reads were already in flight and none gave its slot up within ${this.settings.budgetMs} ms`, transient: 'queue' };
    }
    const slot: Running = { stop: new AbortController() };
    this.running.add(slot);
    try {
      return await read(slot);
    } finally {
      this.running.delete(slot);
      const next = this.newestNext ? this.waiting.pop() : this.waiting.shift();
      this.newestNext = !this.newestNext;
      next?.start();
      this.rebalance();
    }
  }

  /**
   * While reads wait, each running one keeps its slot for its share: a quarter
   * of the budget split among the reads running and waiting, at least
   * MIN_SHARE_MS.
   * Those past it give their slot up now; the next check is when the next
   * one's share is up.
   */
  private rebalance(): void {
    clearTimeout(this.shareTimer);
    this.shareTimer = undefined;
    if (this.waiting.length === 0) return;
    const { budgetMs, maxInFlight } = this.settings;
    const share = Math.max(Math.min(MIN_SHARE_MS, budgetMs / 4), (budgetMs / 4) * (maxInFlight / (this.running.size + this.waiting.length)));
    const now = Date.now();
    let next = Infinity;
    const over: Running[] = [];
    for (const slot of this.running) {
      if (slot.stop.signal.aborted || slot.sent === undefined) continue;
      const ends = slot.sent + share;
      if (ends <= now) over.push(slot);
      else next = Math.min(next, ends);
    }
    // After the I/O already come in (a busy event loop runs due timers first): an answer that arrived in time still counts.
    if (over.length > 0) {
      setImmediate(() => {
        const waited = this.waiting.length;
        if (waited === 0) return;
        for (const slot of over) if (this.running.has(slot)) slot.stop.abort(new ShareEnded(`the Kubernetes API did not answer within this read's share of the budget (${Math.round(share)} ms, while ${waited} other reads waited)`));
      });
    }
    if (next !== Infinity) this.shareTimer = setTimeout(() => this.rebalance(), next - now);
  }

  private async fetch(namespace: string, ref: ClaimReference, deadline: number, slot: Running): Promise<Read> {
    const signal = slot.stop.signal;
    const onSent = (): void => {
      slot.sent = Date.now();
      this.rebalance();
    };
    const read = await readClaim(this.client, namespace, ref, this.versions, { deadline, maxBytes: CLAIM_BODY_LIMIT, signal, onSent });
    if (!('error' in read) || !read.timedOut) return read;
    // Said the same whichever timer saw it first (the pod's budget or the request's own); a share that was up is not the API's answer.
    if (signal.reason instanceof ShareEnded) return { error: signal.reason.message, transient: 'share' };
    return { error: this.noAnswer() };
  }

  private noAnswer(): string {
    return `the Kubernetes API did not answer within ${this.settings.budgetMs} ms`;
  }

  close(): void {
    clearTimeout(this.shareTimer);
    for (const slot of this.running) slot.stop.abort(new ShareEnded('the webhook is shutting down'));
    this.client.close();
  }
}
