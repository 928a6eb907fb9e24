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
 * - one lookup per image in flight, however many pods ask at once.
 */
import type { ImageStartAnswer, LookupFailure, RegistryAnswers } from '../core/decide/start.js';
import type { RegistryOptions } from '../registry/index.js';
import type { WebhookMetrics } from './metrics.js';

export type Answer = ImageStartAnswer | LookupFailure;
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
}

export const DEFAULT_CACHE_SETTINGS: ImageStartCacheSettings = {
  budgetMs: 2000,
  tagTtlMs: 10 * 60_000,
  digestTtlMs: 24 * 60 * 60_000,
  failureTtlMs: 30_000,
  maxEntries: 2000,
};

const isFailure = (answer: Answer): answer is LookupFailure => 'error' in answer;

/** Loaded on the first lookup: most clusters' pods never need one. */
const registryLookup: LookupFunction = (images, options) => import('../registry/index.js').then((registry) => registry.lookupImageStarts(images, options));

export class ImageStartCache {
  private readonly entries = new Map<string, { answer: Answer; expires: number }>();
  private readonly inFlight = new Map<string, Promise<Answer>>();

  constructor(
    private readonly settings: ImageStartCacheSettings,
    private readonly metrics: WebhookMetrics,
    private readonly lookup: LookupFunction = registryLookup,
    private readonly now: () => number = Date.now,
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
    if (waiting.length === 0) return result;
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
        result.set(image, { image, error: `its registry did not answer within ${this.settings.budgetMs} ms (the answer is cached for the next pod when it comes)` });
      }
    }
    return new Map(images.map((image) => [image, result.get(image)!]));
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
