/**
 * Plain values: paths into them, the start a container is meant to get, and
 * the check every door's edit passes before it is emitted (applied to a copy,
 * the result must equal the original with exactly those starts replaced).
 */
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

/** A deep copy of a plain (JSON-like) value. */
export function clone(value: unknown): unknown {
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

/** The value with the intended containers' command and args in place. */
export function withStarts(value: unknown, starts: readonly IntendedStart[]): unknown {
  let expected = value;
  for (const { path, command, args } of starts) {
    const copied = copyAlong(expected, path);
    expected = copied.root;
    const container = copied.node as Record<string, unknown>;
    container.command = [...command];
    if (args === null) delete container.args;
    else container.args = [...args];
  }
  return expected;
}

/**
 * `value` with the nodes along `path` copied (each a shallow copy) and
 * everything else shared: a write at the path's end changes the copy only.
 * The check compares two such copies: shared parts are equal by identity, so
 * it costs the containers written, not the whole pod.
 */
export function copyAlong(value: unknown, path: ValuePath): { root: unknown; node: unknown } {
  const shallow = (node: unknown): unknown => (Array.isArray(node) ? [...node] : node && typeof node === 'object' ? { ...(node as object) } : node);
  const root = shallow(value);
  let node = root;
  for (const step of path) {
    const parent = node as Record<string | number, unknown>;
    node = shallow(parent[step]);
    parent[step] = node;
  }
  return { root, node };
}

/** A plain value as a mapping, or undefined when it is not one (a list, a scalar, null). */
export function asObject(value: unknown): Record<string, unknown> | undefined {
  return value && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
}

/** The value at a path, or undefined where the path leaves the value. */
export function valueAt(value: unknown, path: ValuePath): unknown {
  let current = value;
  for (const key of path) current = (current as Record<string | number, unknown> | undefined)?.[key];
  return current;
}

/** A JSON object as read from a manifest, an AdmissionReview or the API: keys to unknown values. */
export type Plain = Record<string, unknown>;
