/**
 * The check after every edit: the edited text, read as the cluster reads it,
 * must equal the original with exactly the intended containers' `command` and
 * `args` replaced. YAML lets one piece of text mean several things (anchors,
 * aliases, `<<` merge keys), so a correct-looking edit of one container can
 * change another, or leave an alias without its anchor. Such an edit is
 * never emitted: the container is refused with the path that would change.
 */
import { parseDocuments } from './fast-parse.js';

export type ValuePath = readonly (string | number)[];

export interface IntendedStart {
  /** Path of the container object in the document's value. */
  path: ValuePath;
  command: readonly string[];
  /** null: no args (an unwrapped container gets its whole start as command). */
  args: readonly string[] | null;
}

export function formatPath(path: ValuePath): string {
  return path.map((step, i) => (typeof step === 'number' ? `[${step}]` : i === 0 ? step : `.${step}`)).join('') || '(document)';
}

function clone(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(clone);
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    const keys = Object.keys(value);
    for (let i = 0; i < keys.length; i++) out[keys[i]!] = clone((value as Record<string, unknown>)[keys[i]!]);
    return out;
  }
  return value;
}

/** The first path where two plain values differ, or undefined when they are equal. */
export function firstDifference(a: unknown, b: unknown): (string | number)[] | undefined {
  // One path, grown and shrunk as the walk goes: copied only when a difference is found.
  const path: (string | number)[] = [];
  const differs = (a: unknown, b: unknown): boolean => {
    // Object.is, written out: in a short (interpreted) run the call boxes numbers.
    if (a === b ? a !== 0 || 1 / (a as number) === 1 / (b as number) : a !== a && b !== b) return false;
    if (Array.isArray(a) && Array.isArray(b)) {
      if (a.length !== b.length) return true;
      for (let i = 0; i < a.length; i++) {
        path.push(i);
        if (differs(a[i], b[i])) return true;
        path.pop();
      }
      return false;
    }
    if (a && b && typeof a === 'object' && typeof b === 'object' && !Array.isArray(a) && !Array.isArray(b)) {
      const ka = Object.keys(a);
      if (ka.length !== Object.keys(b).length) return true;
      for (let i = 0; i < ka.length; i++) {
        const k = ka[i]!;
        path.push(k);
        if (!Object.prototype.hasOwnProperty.call(b, k)) return true;
        if (differs((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k])) return true;
        path.pop();
      }
      return false;
    }
    return true;
  };
  return differs(a, b) ? [...path] : undefined;
}

function withStarts(value: unknown, starts: readonly IntendedStart[]): unknown {
  const expected = clone(value);
  for (const { path, command, args } of starts) {
    let container = expected as Record<string | number, unknown>;
    for (const step of path) container = container[step] as Record<string | number, unknown>;
    container.command = [...command];
    if (args === null) delete container.args;
    else container.args = [...args];
  }
  return expected;
}

export interface VerifyProblem {
  /** Index of the document within the chunk. */
  document: number;
  message: string;
  /** The path that changed, when the edit changed something it should not have. */
  path?: ValuePath;
}

/**
 * Checks an edited chunk against the original documents' values and the
 * starts intended for each document (by index in the chunk).
 */
export function verifyEditedChunk(editedText: string, originals: readonly unknown[], intended: readonly (readonly IntendedStart[])[], fast = true): VerifyProblem | undefined {
  const list = parseDocuments(editedText, fast);
  if (list.length !== originals.length) return { document: 0, message: `the edit would split or merge documents (${originals.length} before, ${list.length} after)` };
  for (const [i, doc] of list.entries()) {
    const error = doc.errors[0];
    if (error) return { document: i, message: `the edited document would not be valid YAML: ${error.message.split('\n')[0]}` };
    let actual: unknown;
    try {
      actual = doc.toJS();
    } catch (e) {
      return { document: i, message: `the edited document would not be readable: ${(e as Error).message}` };
    }
    const expected = withStarts(originals[i], intended[i] ?? []);
    const path = firstDifference(expected, actual);
    if (path) return { document: i, path, message: `the edit would also change ${formatPath(path)}` };
  }
  return undefined;
}
