/**
 * The registry client's options from the wrap's, for every door that looks
 * images up (the render, explain and resolve; the webhook and admit; the
 * audit): one function, each door passing its time budget as a value. Every
 * door gets the same policy (./allow.ts): the images a render, a pod or a
 * cluster names come from whoever wrote them, so none of them may aim a
 * lookup at a host and port of their choice.
 *
 * Plain data, no Node module: a door imports this at start-up (the client
 * itself, ./index.ts, is loaded only when a lookup runs).
 */
import { KNOWN_IMAGES, parseImage, type Options } from '../core/index.js';
import type { RegistryPolicy } from './allow.js';
import type { RegistryOptions } from './index.js';

/** How long a door lets its lookups take, from registryTimeoutSeconds (one request). */
export interface LookupBudget {
  /** One request at most this long, whatever registryTimeoutSeconds says; absent: as it says. */
  requestCapMs?: number;
  /** The whole call (every image together) at least this long; it is 3 requests' time otherwise. */
  totalFloorMs: number;
}

/**
 * A command's run (the render, explain, resolve, the audit): a request as
 * registryTimeoutSeconds says, every image together within 15 s or three
 * requests, so that a lookup never holds helm (or Argo CD's 60 s deadline)
 * for long.
 */
export const COMMAND_BUDGET: LookupBudget = { totalFloorMs: 15_000 };

/**
 * An admission (the webhook, admit): a request within 5 s, the whole lookup
 * within three; the webhook waits for it only its --registry-budget-ms (the
 * lookup runs on after that, bounded, to fill the cache).
 */
export const ADMISSION_BUDGET: LookupBudget = { requestCapMs: 5000, totalFloorMs: 0 };

/**
 * The registries lookups may reach (./allow.ts): those the built-in image
 * table knows, those the config's images name (mirrors), the insecure ones
 * it lists, and registryAllow's; those named there exactly (not the public
 * ones, not a *.domain) may be on private addresses.
 */
export function registryPolicy(options: Pick<Options, 'images' | 'registryInsecure' | 'registryAllow'>): RegistryPolicy {
  const known = new Set(KNOWN_IMAGES.map((row) => parseImage(row.repository).registry));
  const named = new Set([...options.images.map((entry) => parseImage(entry.repository).registry), ...options.registryInsecure, ...options.registryAllow.filter((r) => !r.startsWith('*.'))].filter((r) => !known.has(r)));
  return { registries: [...known, ...named, ...options.registryAllow.filter((r) => r.startsWith('*.'))], privateRegistries: [...named] };
}

export function registryOptions(options: Options, env: Readonly<Record<string, string | undefined>>, budget: LookupBudget): RegistryOptions {
  const requestTimeoutMs = Math.min(budget.requestCapMs ?? Infinity, Math.round(options.registryTimeoutSeconds * 1000));
  return {
    policy: registryPolicy(options),
    platform: options.registryPlatform,
    cacheDir: options.cacheDir,
    requestTimeoutMs,
    totalTimeoutMs: Math.max(budget.totalFloorMs, 3 * requestTimeoutMs),
    insecureRegistries: options.registryInsecure,
    caFile: options.registryCaFile,
    env,
  };
}

/**
 * `resolve IMAGE…`: the operator typed these images, so their registries are
 * allowed as if named in registryAllow (private addresses included), and a
 * loopback one is reached over plain HTTP as before (a local registry); the
 * policy still holds for everything else a lookup may be sent to.
 */
export function withTypedImages(options: Options, images: readonly string[]): Options {
  const registries = images.flatMap((image) => {
    try {
      return [parseImage(image.trim()).registry];
    } catch {
      return [];
    }
  });
  const loopback = registries.filter((registry) => /^(?:localhost|127\.\d+\.\d+\.\d+|\[::1\])(?::\d+)?$/i.test(registry));
  return { ...options, registryAllow: [...new Set([...options.registryAllow, ...registries])], registryInsecure: [...new Set([...options.registryInsecure, ...loopback])] };
}
