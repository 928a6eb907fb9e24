/**
 * Reading YAML nodes the way Kubernetes reads the values: a duplicate key's
 * last value wins (sigs.k8s.io/yaml, as Helm 3 and 4 apply it), `<<` merge
 * keys contribute the keys a mapping does not set itself, aliases stand for
 * their anchor's node. The rewrite needs nodes (for positions), detection
 * needs values; both must see the same container, so every node lookup goes
 * through here.
 */
import { isAlias, isMap, isScalar, isSeq, type Document, type Node, type Pair, type YAMLMap } from 'yaml';

/**
 * A parsed document: `yaml`'s Document, or one read by the fast path
 * (src/core/yaml/fast-parse.ts), which builds the same nodes (and never aliases).
 */
export interface ParsedDocument {
  contents: unknown;
  range?: readonly [number, number, number];
  errors: readonly { message: string; pos: readonly [number, number] }[];
  /** No mapping repeats a key (the fast path reads no other document): no need to look for duplicates. */
  uniqueKeys?: boolean;
  toJS(): unknown;
}

/**
 * Options for every parse: what the cluster reads, not what YAML 1.2 strictly allows. logLevel
 * `error`: the library's warnings (a key that is a list or a mapping, stringified in a value)
 * would otherwise be Node process warnings on stderr, a library's hint among our messages.
 */
export const PARSE_OPTIONS = { uniqueKeys: false, merge: true, logLevel: 'error' } as const;

/** Merges nest rarely more than once or twice; the bound stops a malicious cycle. */
const MAX_MERGE_DEPTH = 32;

function isMergeKey(key: unknown): boolean {
  return isScalar(key) && (key.value === '<<' || (typeof key.value === 'symbol' && key.source === '<<'));
}

export function keyName(pair: Pair): string | undefined {
  const key = pair.key;
  if (!isScalar(key) || isMergeKey(key)) return undefined;
  return key.value === null || key.value === undefined ? undefined : String(key.value);
}

/** The node an alias stands for; any other node as it is. */
export function resolveAlias(node: unknown, doc: ParsedDocument): unknown {
  let current = node;
  // Only `yaml`'s documents hold aliases.
  for (let hops = 0; isAlias(current) && hops < MAX_MERGE_DEPTH; hops++) current = current.resolve(doc as Document);
  return current;
}

/** Mappings a `<<` value merges in, highest precedence first. */
function mergeSources(value: unknown, doc: ParsedDocument): YAMLMap[] {
  const resolved = resolveAlias(value, doc);
  if (isMap(resolved)) return [resolved];
  if (isSeq(resolved)) return resolved.items.map((item) => resolveAlias(item, doc)).filter((item): item is YAMLMap => isMap(item));
  return [];
}

export interface EffectivePair {
  pair: Pair;
  /** The pair is written in this mapping (not merged in from another one). */
  own: boolean;
}

/** The pair that decides `key` in `map`: its last own pair, else the first merge source that has one. */
export function effectivePair(map: YAMLMap, key: string, doc: ParsedDocument, depth = 0): EffectivePair | undefined {
  let own: Pair | undefined;
  const merges: Pair[] = [];
  for (let i = 0; i < map.items.length; i++) {
    const pair = map.items[i]!;
    if (isMergeKey(pair.key)) merges.push(pair);
    else if (keyName(pair) === key) own = pair;
  }
  if (own) return { pair: own, own: true };
  if (depth >= MAX_MERGE_DEPTH) return undefined;
  for (const merge of merges) {
    for (const source of mergeSources(merge.value, doc)) {
      const found = effectivePair(source, key, doc, depth + 1);
      if (found) return { pair: found.pair, own: false };
    }
  }
  return undefined;
}

/** The value node of `key` in `map` (aliases resolved), as the cluster sees it. */
export function effectiveGet(map: unknown, key: string, doc: ParsedDocument): unknown {
  if (!isMap(map)) return undefined;
  const found = effectivePair(map, key, doc);
  return found ? resolveAlias(found.pair.value, doc) : undefined;
}

/** Keys that appear more than once in one mapping, with a path for messages. */
export interface DuplicateKey {
  path: string;
  key: string;
}

/** Every duplicated key of the document, found in one walk (aliases are not followed: their target is walked where it is written). */
export function findDuplicateKeys(root: unknown): DuplicateKey[] {
  const found: DuplicateKey[] = [];
  const walk = (node: unknown, path: string): void => {
    if (isMap(node)) {
      const seen = new Set<string>();
      const reported = new Set<string>();
      for (const pair of node.items) {
        const name = keyName(pair);
        if (name !== undefined) {
          if (seen.has(name) && !reported.has(name)) {
            found.push({ path: path || '(top level)', key: name });
            reported.add(name);
          }
          seen.add(name);
        }
        walk(pair.value, name === undefined ? path : path ? `${path}.${name}` : name);
      }
    } else if (isSeq(node)) {
      node.items.forEach((item, i) => walk(item, `${path}[${i}]`));
    }
  };
  walk(root, '');
  return found;
}

export type { Node };
