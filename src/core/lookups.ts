/**
 * Registry lookups around a pure run: the core says which images only their
 * registry can place (`wantedImages`); a door looks them up (I/O, at its
 * edge, within its own budget) and the core runs once more with the answers.
 * The CLI and the webhook share this order.
 */
import type { RegistryAnswers } from './decide/start.js';
import type { RegistryLookupMode } from './options.js';

export async function withLookups<R extends { wantedImages: readonly string[] }>(
  run: (registry?: RegistryAnswers) => R,
  mode: RegistryLookupMode,
  lookup: ((images: readonly string[]) => Promise<RegistryAnswers>) | undefined,
): Promise<R> {
  const first = run();
  if (first.wantedImages.length === 0 || mode === 'never' || !lookup) return first;
  return run(await lookup(first.wantedImages));
}
