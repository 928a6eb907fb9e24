/**
 * "Did you mean": the names close to one that is not known (a flag, a
 * command, a config key, an environment variable), nearest first. A name is
 * close when it is a few edits away (a typo: `--timout-seconds`,
 * `timeoutSecond`, `explian`) or a part of the valid one (`--registry`).
 */

/** Levenshtein distance (insertions, deletions, substitutions), in two rows. */
export function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length]!;
}

/**
 * The candidates close to `given`, nearest first, at most `limit`. Names are
 * compared without case and without what `strip` removes (a flag's dashes, a
 * variable's prefix), so that the distance counts only the part that differs.
 */
export function closest(given: string, candidates: readonly string[], strip: (name: string) => string = (name) => name, limit = 3): string[] {
  const name = strip(given).toLowerCase();
  if (name.length < 2) return [];
  const scored = [...new Set(candidates)].map((candidate) => {
    const valid = strip(candidate).toLowerCase();
    const distance = editDistance(name, valid);
    const close = distance <= Math.max(2, Math.floor(valid.length / 4)) || (name.length >= 3 && (valid.includes(name) || name.includes(valid)));
    return { candidate, distance, close };
  });
  // A typo (a few edits away) is what was meant: only the nearest of those. Else the names it is a part of.
  const typos = scored.filter((s) => s.distance <= Math.max(2, Math.floor(strip(s.candidate).length / 4)));
  const nearest = Math.min(...typos.map((s) => s.distance));
  const picked = typos.length ? typos.filter((s) => s.distance === nearest) : scored.filter((s) => s.close);
  return picked
    .sort((a, b) => a.distance - b.distance)
    .slice(0, limit)
    .map((s) => s.candidate);
}

/** `did you mean A or B?`, or undefined when nothing is close. */
export function didYouMean(given: string, candidates: readonly string[], strip?: (name: string) => string): string | undefined {
  const close = closest(given, candidates, strip);
  return close.length ? `did you mean ${close.join(' or ')}?` : undefined;
}

/** A value from the input as a message may quote it: JSON-quoted, cut to `max` characters. */
export function quoteBounded(value: unknown, max = 60): string {
  let text: string;
  try {
    text = typeof value === 'string' ? JSON.stringify(value) : (JSON.stringify(value) ?? String(value));
  } catch {
    text = String(value);
  }
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
