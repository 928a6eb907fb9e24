/**
 * What an image runs (config.Entrypoint / config.Cmd), read from its
 * registry when the built-in table cannot place it. See docs/registry-lookup.md.
 *
 * Nothing runs at import time; Node's network modules load on the first lookup.
 */
import { parseImage, repositoryForConfig, type ImageReference } from '../core/tables/image-ref.js';
import { DiskCache, defaultCacheDir, type CachedConfig, type ImageStart } from './cache.js';
import { DIGEST_PATTERN, formatPlatform, LookupError, parsePlatform, Registry, type ClientContext, type Platform } from './client.js';
import { Credentials, dockerConfigPath } from './credentials.js';
import { noProxyMatches } from './http.js';
import { registryAllowed, type RegistryPolicy } from './allow.js';
import type { ImageStartAnswer, LookupFailure } from '../core/index.js';

export type { ImageStartAnswer, LookupFailure, RegistryPolicy };

/** A failure the door may tell apart: `notAllowed`, the policy refused the registry by name before any connection. */
export type RegistryFailure = LookupFailure;

export { noProxyMatches, registryAllowed };
export { isPublicAddress } from './allow.js';

export interface RegistryOptions {
  /** os/architecture[/variant], e.g. linux/amd64 (the default to pass), linux/arm64/v8. */
  platform: string;
  /** Default: $XDG_CACHE_HOME/vram-preflight, else $HOME/.cache/vram-preflight. */
  cacheDir?: string;
  /** Per request: connect + answer + body. ~5000. */
  requestTimeoutMs: number;
  /** For the whole call, all images together. ~15000. */
  totalTimeoutMs: number;
  /** Registries (host or host:port) that may be reached over plain HTTP / unverified TLS. Loopback always may. */
  insecureRegistries?: string[];
  /** Extra CA certificates (PEM file) to trust for registries, next to Node's roots and NODE_EXTRA_CA_CERTS. */
  caFile?: string;
  /** HOME, DOCKER_CONFIG, XDG_CACHE_HOME, HTTPS_PROXY, NO_PROXY, PATH (for docker-credential-*). */
  env: Readonly<Record<string, string | undefined>>;
  now?: () => Date;
  /** Lookups in flight at once for this call. Default 4 (and never more than the process-wide cap: setLookupLimit). */
  concurrency?: number;
  /** Which registries may be asked, at which addresses (./allow.ts; every door gives one: ./options.ts); absent: any registry, any address. */
  policy?: RegistryPolicy;
}

/**
 * Lookups in flight in the whole process, at most `limit`: however many
 * distinct images the pods name at once, the process opens at most that many
 * lookups' connections. The others wait their turn within their own
 * deadline; past `queueLimit` waiting, a lookup fails at once.
 */
class LookupSlots {
  private running = 0;
  private readonly waiting: { start: () => void }[] = [];

  constructor(
    public limit: number,
    public queueLimit: number,
  ) {}

  /** Resolves with the slot's release, or with undefined when no slot came before `deadline` (epoch ms) or the queue is full. */
  take(deadline: number): Promise<(() => void) | undefined> {
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      this.running--;
      const next = this.waiting.shift();
      if (next) next.start();
    };
    if (this.running < this.limit) {
      this.running++;
      return Promise.resolve(release);
    }
    if (this.waiting.length >= this.queueLimit) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      const waiter = {
        start: () => {
          clearTimeout(timer);
          this.running++;
          resolve(release);
        },
      };
      const timer = setTimeout(() => {
        this.waiting.splice(this.waiting.indexOf(waiter), 1);
        resolve(undefined);
      }, Math.max(0, deadline - Date.now()));
      this.waiting.push(waiter);
    });
  }

  get inFlight(): number {
    return this.running;
  }
}

const slots = new LookupSlots(8, 256);

/** Sets the process-wide cap on lookups in flight (and how many may wait for a slot). */
export function setLookupLimit(limit: number, queueLimit = Math.max(64, limit * 32)): void {
  slots.limit = Math.max(1, limit);
  slots.queueLimit = queueLimit;
}

/** Lookups running now in this process (tests). */
export function lookupsInFlight(): number {
  return slots.inFlight;
}

export function isLookupFailure(result: ImageStartAnswer | LookupFailure): result is LookupFailure {
  return 'error' in result;
}

const REPOSITORY_PATTERN = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$/;
const TAG_PATTERN = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;

export function age(fromIso: string, now: Date): string {
  const ms = Math.max(0, now.getTime() - Date.parse(fromIso));
  const minutes = Math.floor(ms / 60_000);
  if (minutes < 1) return 'less than a minute';
  if (minutes < 60) return `${minutes} min`;
  const hours = Math.floor(minutes / 60);
  if (hours < 48) return `${hours} h ${minutes % 60} min`;
  return `${Math.floor(hours / 24)} days`;
}

interface Run {
  options: RegistryOptions;
  want: Platform;
  wantText: string;
  cache: DiskCache;
  registries: Map<string, Registry>;
  ctx: ClientContext;
  now: () => Date;
}

function startFor(cached: CachedConfig | undefined, wantText: string): ImageStart | undefined {
  if (!cached) return undefined;
  return cached.image ?? cached.platforms?.[wantText];
}

async function lookupOne(image: string, run: Run): Promise<ImageStartAnswer | RegistryFailure> {
  let ref: ImageReference;
  try {
    ref = parseImage(image);
  } catch (err) {
    return { image, error: `not an image reference (${(err as Error).message})`, kind: 'invalid' };
  }
  if (!REPOSITORY_PATTERN.test(ref.repository)) return { image, error: `not an image reference: repository ${JSON.stringify(ref.repository)} is not a valid name`, kind: 'invalid' };
  if (ref.digest !== undefined && !DIGEST_PATTERN.test(ref.digest)) return { image, error: `not an image reference: digest ${JSON.stringify(ref.digest)} is not sha256:<64 hex> or sha512:<128 hex>`, kind: 'invalid' };
  if (ref.tag !== undefined && !TAG_PATTERN.test(ref.tag)) return { image, error: `not an image reference: tag ${JSON.stringify(ref.tag)} is not a valid tag`, kind: 'invalid' };

  if (!registryAllowed(ref.registry, run.options.policy).allowed) {
    return { image, error: `its registry ${ref.registry} is not one the lookups are allowed to reach (the built-in image table's, and those the config names in images, registryInsecure or registryAllow): --registry-allow ${ref.registry} (registryAllow in the config file) allows it; a registry over plain HTTP (a local one) goes in --registry-insecure ${ref.registry} instead`, notAllowed: true };
  }
  let registry = run.registries.get(ref.registry);
  if (!registry) {
    registry = new Registry(ref.registry, run.ctx);
    run.registries.set(ref.registry, registry);
  }
  const { cache, wantText, want } = run;
  const nowIso = run.now().toISOString();
  const warnings: string[] = [];
  const answer = (start: ImageStart, digest: string, source: ImageStartAnswer['source'], checkedAt: string): ImageStartAnswer => {
    const cacheWarning = cache.problem();
    if (cacheWarning) warnings.push(cacheWarning);
    return { image, entrypoint: start.entrypoint, cmd: start.cmd, digest, platform: start.platform, source, checkedAt, ...(warnings.length > 0 ? { warning: warnings.join('; ') } : {}) };
  };
  const fetchAndStore = async (digest: string): Promise<ImageStart> => {
    const read = await registry.readStart(ref.repository, digest, want);
    if (read.warning) warnings.push(read.warning);
    if (read.kind === 'image') {
      await cache.writeConfig({ digest, image: read.start });
    } else {
      const previous = await cache.readConfig(digest);
      await cache.writeConfig({ digest, platforms: { ...(previous?.platforms ?? {}), [wantText]: read.start } });
    }
    return read.start;
  };

  try {
    if (ref.digest !== undefined) {
      // Pinned: immutable, no HEAD; `tag@digest` means the digest.
      const cached = startFor(await cache.readConfig(ref.digest), wantText);
      if (cached) return answer(cached, ref.digest, 'cache', nowIso);
      return answer(await fetchAndStore(ref.digest), ref.digest, 'registry', nowIso);
    }
    const tag = ref.tag ?? 'latest';
    // The last answer for this tag: the tag file is written only once its digest's start is cached.
    const last = await cache.readTag(ref.registry, ref.repository, tag);
    const lastStart = last && startFor(await cache.readConfig(last.digest), wantText);
    const stale = (err: LookupError, moved?: string): ImageStartAnswer | LookupFailure => {
      if (!last || !lastStart) return { image, error: `${err.message} (and no earlier answer for this tag is cached)`, kind: err.kind };
      warnings.push(`${err.message}; ${moved ? `the tag now points at ${moved}, which could not be read, so ` : ''}using the answer cached ${age(last.checkedAt, run.now())} ago (${last.checkedAt}, ${last.digest}), which may be out of date`);
      return answer(lastStart, last.digest, 'stale-cache', last.checkedAt);
    };
    let digest: string;
    try {
      digest = await registry.resolveTag(ref.repository, tag);
    } catch (err) {
      if (err instanceof LookupError && err.unreachable) return stale(err);
      throw err;
    }
    let start = startFor(await cache.readConfig(digest), wantText);
    const source = start ? 'cache' : 'registry';
    if (!start) {
      try {
        start = await fetchAndStore(digest);
      } catch (err) {
        // HEAD is free on Docker Hub, GET is not: a pull-limit 429 can come only now.
        if (err instanceof LookupError && err.unreachable) return stale(err, last?.digest !== digest ? digest : undefined);
        throw err;
      }
    }
    await cache.writeTag(ref.registry, ref.repository, tag, { digest, checkedAt: nowIso });
    return answer(start, digest, source, nowIso);
  } catch (err) {
    return err instanceof LookupError ? { image, error: err.message, kind: err.kind } : { image, error: `lookup failed: ${(err as Error).message ?? String(err)}` };
  }
}

/**
 * Look up the start of each image (deduplicated, at most `concurrency` at a
 * time). Never throws for a registry problem: each image maps to an answer
 * or a one-line failure. Never runs longer than about totalTimeoutMs.
 */
export async function lookupImageStarts(images: readonly string[], options: RegistryOptions): Promise<Map<string, ImageStartAnswer | RegistryFailure>> {
  const results = new Map<string, ImageStartAnswer | RegistryFailure>();
  const unique = [...new Set(images)];
  if (unique.length === 0) return results;
  let want: Platform;
  try {
    want = parsePlatform(options.platform);
  } catch (err) {
    for (const image of unique) results.set(image, { image, error: (err as Error).message, kind: 'invalid' });
    return results;
  }
  const { homedir } = await import('node:os');
  let ca: string[] | undefined;
  if (options.caFile) {
    const { readFile } = await import('node:fs/promises');
    try {
      ca = [await readFile(options.caFile, 'utf8')];
    } catch (err) {
      for (const image of unique) results.set(image, { image, error: `CA file ${options.caFile} could not be read (${(err as NodeJS.ErrnoException).code ?? String(err)})`, kind: 'invalid' });
      return results;
    }
  }
  const requestTimeoutMs = Math.max(1, options.requestTimeoutMs);
  const deadline = Date.now() + Math.max(1, options.totalTimeoutMs);
  const run: Run = {
    options,
    want,
    wantText: formatPlatform(want),
    cache: new DiskCache(options.cacheDir ?? defaultCacheDir(options.env, homedir)),
    registries: new Map(),
    now: options.now ?? (() => new Date()),
    ctx: {
      env: options.env,
      requestTimeoutMs,
      totalTimeoutMs: options.totalTimeoutMs,
      deadline,
      insecureRegistries: options.insecureRegistries ?? [],
      ...(ca ? { ca } : {}),
      ...(options.policy ? { policy: options.policy } : {}),
      credentials: new Credentials(options.env, dockerConfigPath(options.env, homedir), () => Math.min(requestTimeoutMs, deadline - Date.now())),
    },
  };
  const queue = [...unique];
  const worker = async (): Promise<void> => {
    for (let image = queue.shift(); image !== undefined; image = queue.shift()) {
      const release = await slots.take(deadline);
      if (!release) {
        results.set(image, { image, error: `too many lookups in flight in this process (at most ${slots.limit} at once), and this one's turn did not come in time` });
        continue;
      }
      try {
        results.set(image, await lookupOne(image.trim(), run).then((r) => ({ ...r, image })));
      } finally {
        release();
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(options.concurrency ?? 4, unique.length) }, worker));
  // Keep the caller's order.
  return new Map(unique.map((image) => [image, results.get(image)!]));
}

const YAML_WORDS = /^(?:y|n|yes|no|true|false|on|off|null|~)$/i;

function scalar(text: string): string {
  return /^[A-Za-z_/][A-Za-z0-9._/:@+-]*$/.test(text) && !YAML_WORDS.test(text) ? text : JSON.stringify(text);
}

function flow(list: readonly string[]): string {
  return `[${list.map((s) => JSON.stringify(s)).join(', ')}]`;
}

/** Config-file `images` entries (YAML) that pin these answers, for `vram-preflight resolve IMAGE…`. */
export function renderImageEntries(answers: readonly ImageStartAnswer[]): string {
  const lines = ['images:'];
  for (const a of answers) {
    const ref = parseImage(a.image);
    const repository = repositoryForConfig(ref);
    lines.push(`  - repository: ${scalar(repository)}`);
    if (ref.digest !== undefined) lines.push(`    digest: ${scalar(ref.digest)}`);
    else {
      const tag = ref.tag ?? 'latest';
      // Tags cannot hold `*` (the config's glob), but never emit a pattern by accident.
      if (!tag.includes('*')) lines.push(`    tag: ${scalar(tag)}`);
      else lines.push(`    digest: ${scalar(a.digest)}`);
    }
    if (a.entrypoint.length === 0) lines.push('    # the image has no ENTRYPOINT: a container that gives only args runs args[0] as the program');
    lines.push(`    entrypoint: ${flow(a.entrypoint)}`);
    lines.push(`    cmd: ${flow(a.cmd)}`);
    const when = a.checkedAt.slice(0, 10);
    const how = a.source === 'stale-cache' ? `from the cache (registry unreachable), last confirmed ${when}` : `read from the registry ${when}`;
    lines.push(`    # ${a.image}${ref.digest === a.digest ? '' : ` = ${a.digest}`}, ${a.platform}, ${how}`);
  }
  return `${lines.join('\n')}\n`;
}
