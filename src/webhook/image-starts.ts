/**
 * Registry lookups for the webhook: what an image runs, read from its
 * registry (src/registry, loaded on the first lookup) when neither the config
 * nor the built-in table places it. Unlike the CLI, which looks up once per
 * render, the webhook answers many pods a second for minutes on end, inside
 * the API server's webhook timeout:
 *
 * - a budget per admission (default 2 s of a 5 s webhook timeout): what has
 *   not answered by then counts as a failure for this pod, which is admitted
 *   unchanged with the reason; the lookup itself runs on (bounded by the
 *   registry client's own deadline) and its answer is cached for the next pod;
 * - an in-memory cache shared by all requests: answers for a digest are kept
 *   long (a digest never changes what it names), for a tag a few minutes (a
 *   tag can move), failures briefly (a registry that is down is not asked
 *   again by every pod, and is asked again soon);
 * - one lookup per image in flight, however many pods ask at once (and, in
 *   src/registry, a cap on lookups in flight in the process);
 * - what a pod's creator reads of a failure (its annotation and warning) is
 *   only that the lookup failed, or that its registry is not allowed: never
 *   the network's answer (refused, timed out, which address), which would
 *   make the webhook a port scanner for anyone who may create a pod. The
 *   webhook's log has the reason.
 */
import { echo } from './answers.js';
import { type ImageStartAnswer, type LookupFailure, type Options, type RegistryAnswers } from '../core/index.js';
import type { RegistryFailure, RegistryOptions } from '../registry/index.js';
import { ADMISSION_BUDGET, registryOptions } from '../registry/options.js';
import type { WebhookMetrics } from './metrics.js';

export type Answer = ImageStartAnswer | RegistryFailure;
export type LookupFunction = (images: readonly string[], options: RegistryOptions) => Promise<Map<string, Answer>>;

export interface ImageStartCacheSettings {
  /** How long one admission waits for lookups, ms. */
  budgetMs: number;
  /** How long an answer for a tag is kept, ms. */
  tagTtlMs: number;
  /** How long an answer for a digest is kept, ms. */
  digestTtlMs: number;
  /** How long a failure is kept, ms. */
  failureTtlMs: number;
  /** Entries kept at most (the oldest go first). */
  maxEntries: number;
  /** Lookups in flight in the process, at most (src/registry's cap). */
  lookupsInFlight: number;
}

export const DEFAULT_CACHE_SETTINGS: ImageStartCacheSettings = {
  budgetMs: 2000,
  tagTtlMs: 10 * 60_000,
  digestTtlMs: 24 * 60 * 60_000,
  failureTtlMs: 30_000,
  maxEntries: 2000,
  lookupsInFlight: 8,
};

/**
 * The registry client's options for an admission (the webhook, admit): the
 * admission's time budget, the policy of every door, and the cache under
 * TMPDIR (the chart mounts an emptyDir at /tmp on a read-only root).
 */
export function admissionLookupOptions(options: Options, env: Readonly<Record<string, string | undefined>>): RegistryOptions {
  return registryOptions({ ...options, cacheDir: options.cacheDir ?? `${env.TMPDIR || '/tmp'}/vram-preflight-cache` }, env, ADMISSION_BUDGET);
}

const isFailure = (answer: Answer): answer is RegistryFailure => 'error' in answer;

/** What a pod's annotation and warning say of a failed lookup. */
export const LOOKUP_FAILED = 'the lookup failed (the webhook\'s log says why)';
export const LOOKUP_NOT_ALLOWED = 'its registry is not one the webhook may look up (registryAllow in the config)';

/** Loaded on the first lookup: most clusters' pods never need one. */
const registryLookup = (lookupsInFlight: number): LookupFunction => (images, options) =>
  import('../registry/index.js').then((registry) => {
    registry.setLookupLimit(lookupsInFlight);
    return registry.lookupImageStarts(images, options);
  });

export class ImageStartCache {
  private readonly entries = new Map<string, { answer: Answer; expires: number }>();
  private readonly inFlight = new Map<string, Promise<Answer>>();

  constructor(
    private readonly settings: ImageStartCacheSettings,
    private readonly metrics: WebhookMetrics,
    private readonly lookup: LookupFunction = registryLookup(settings.lookupsInFlight),
    private readonly now: () => number = Date.now,
    private readonly log: (entry: Record<string, unknown>) => void = () => {},
  ) {}

  /** Forgets every answer (the options they were read with changed). Lookups in flight finish into the new cache. */
  clear(): void {
    this.entries.clear();
  }

  /** Answers for `images`, within the budget; never throws. */
  async answers(images: readonly string[], options: RegistryOptions): Promise<RegistryAnswers> {
    const result = new Map<string, Answer>();
    const waiting: { image: string; promise: Promise<Answer> }[] = [];
    for (const image of new Set(images)) {
      const cached = this.cached(image);
      if (cached) {
        this.metrics.registryLookups.inc({ result: isFailure(cached) ? 'negative-hit' : 'hit' });
        result.set(image, cached);
        continue;
      }
      let promise = this.inFlight.get(image);
      if (promise) this.metrics.registryLookups.inc({ result: 'shared' });
      else promise = this.start(image, options);
      waiting.push({ image, promise });
    }
    if (waiting.length === 0) return new Map(images.map((image) => [image, forPod(result.get(image)!)]));
    let timer: NodeJS.Timeout | undefined;
    const budget = new Promise<void>((resolve) => (timer = setTimeout(resolve, this.settings.budgetMs)));
    const settled = new Map<string, Answer>();
    await Promise.race([Promise.all(waiting.map(({ image, promise }) => promise.then((answer) => void settled.set(image, answer)))), budget]);
    clearTimeout(timer);
    for (const { image } of waiting) {
      const answer = settled.get(image);
      if (answer) result.set(image, answer);
      else {
        this.metrics.registryLookups.inc({ result: 'timeout' });
        this.log({ level: 'warn', msg: 'registry lookup unfinished', image: echo(image, 300), error: `not answered within the budget of ${this.settings.budgetMs} ms; its answer is cached for the next pod when it comes` });
        result.set(image, { image, error: LOOKUP_FAILED });
      }
    }
    return new Map(images.map((image) => [image, forPod(result.get(image)!)]));
  }

  private cached(image: string): Answer | undefined {
    const entry = this.entries.get(image);
    if (!entry) return undefined;
    if (entry.expires > this.now()) return entry.answer;
    this.entries.delete(image);
    return undefined;
  }

  private start(image: string, options: RegistryOptions): Promise<Answer> {
    const promise = this.lookup([image], options)
      .then((answers) => answers.get(image) ?? { image, error: 'the registry client gave no answer' })
      .catch((error: unknown): Answer => ({ image, error: `lookup failed: ${error instanceof Error ? error.message : String(error)}` }))
      .then((answer) => {
        this.inFlight.delete(image);
        this.metrics.registryLookups.inc({ result: isFailure(answer) ? 'failed' : 'answered' });
        if (isFailure(answer)) this.log({ level: 'warn', msg: 'registry lookup failed', image: echo(image, 300), error: answer.error.slice(0, 1000) });
        this.store(image, answer);
        return answer;
      });
    this.inFlight.set(image, promise);
    return promise;
  }

  private store(image: string, answer: Answer): void {
    const ttl = isFailure(answer) ? this.settings.failureTtlMs : image.includes('@') ? this.settings.digestTtlMs : this.settings.tagTtlMs;
    this.entries.delete(image);
    this.entries.set(image, { answer, expires: this.now() + ttl });
    // A Map iterates in insertion order: the first key is the oldest.
    while (this.entries.size > this.settings.maxEntries) this.entries.delete(this.entries.keys().next().value!);
  }
}

/** An answer as the pod's creator may read it: a failure says only that it failed, or was not allowed. */
function forPod(answer: Answer): ImageStartAnswer | LookupFailure {
  if (!isFailure(answer)) return answer;
  return { image: answer.image, error: answer.notAllowed ? LOOKUP_NOT_ALLOWED : LOOKUP_FAILED };
}
