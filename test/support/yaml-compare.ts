/**
 * Differential check of the fast parse path (src/core/yaml/fast-parse.ts) against the
 * `yaml` library: when the fast path reads a text, `yaml` must read it
 * without error into the same nodes (class, range, type, value, source,
 * format, flow, anchor, tag) and the same value (toJS, key order included).
 */
import { isDeepStrictEqual } from 'node:util';
import { isMap, isPair, isScalar, isSeq, parseAllDocuments } from 'yaml';
import { parseSimpleDocument } from '../../src/core/yaml/fast-parse.js';
import { PARSE_OPTIONS } from '../../src/core/yaml/nodes.js';

type Any = Record<string, unknown>;

function kind(node: unknown): string {
  if (node === null || node === undefined) return String(node);
  if (isMap(node)) return 'map';
  if (isSeq(node)) return 'seq';
  if (isScalar(node)) return 'scalar';
  if (isPair(node)) return 'pair';
  return `other:${(node as object).constructor?.name}`;
}

function sameNode(fast: unknown, slow: unknown, path: string): string | undefined {
  if (kind(fast) !== kind(slow)) return `${path}: ${kind(fast)} (fast) vs ${kind(slow)} (yaml)`;
  if (fast === null || fast === undefined) return undefined;
  const f = fast as Any;
  const s = slow as Any;
  for (const prop of ['range', 'type', 'source', 'format', 'minFractionDigits', 'anchor', 'tag']) {
    if (!isDeepStrictEqual(f[prop], s[prop])) return `${path}.${prop}: ${JSON.stringify(f[prop])} (fast) vs ${JSON.stringify(s[prop])} (yaml)`;
  }
  if (isScalar(fast) && !Object.is(f.value, s.value)) return `${path}.value: ${JSON.stringify(f.value)} (fast) vs ${JSON.stringify(s.value)} (yaml)`;
  if (isMap(fast) || isSeq(fast)) {
    if (Boolean(f.flow) !== Boolean(s.flow)) return `${path}.flow: ${f.flow} vs ${s.flow}`;
    const fi = f.items as unknown[];
    const si = s.items as unknown[];
    if (fi.length !== si.length) return `${path}.items: ${fi.length} (fast) vs ${si.length} (yaml)`;
    for (let i = 0; i < fi.length; i++) {
      const difference = isMap(fast) ? sameNode((fi[i] as Any).key, (si[i] as Any).key, `${path}[${i}].key`) ?? sameNode((fi[i] as Any).value, (si[i] as Any).value, `${path}[${i}].value`) : sameNode(fi[i], si[i], `${path}[${i}]`);
      if (difference) return difference;
    }
  }
  return undefined;
}

/** Key order matters to us (output is deterministic): compare it too. */
function sameValue(a: unknown, b: unknown): boolean {
  if (!isDeepStrictEqual(a, b)) return false;
  if (a && typeof a === 'object') {
    if (!Array.isArray(a) && JSON.stringify(Object.keys(a)) !== JSON.stringify(Object.keys(b as object))) return false;
    return Object.keys(a).every((k) => sameValue((a as Any)[k], (b as Any)[k]));
  }
  return true;
}

export interface Comparison {
  /** The fast path read the text. */
  read: boolean;
  /** What differs from `yaml`, when the fast path read it. */
  difference?: string;
}

export function compareWithYaml(text: string): Comparison {
  const fast = parseSimpleDocument(text);
  if (!fast) return { read: false };
  const docs = parseAllDocuments(text, PARSE_OPTIONS);
  const list = Array.isArray(docs) ? docs : [];
  if (list.length !== 1) return { read: true, difference: `yaml reads ${list.length} documents` };
  const doc = list[0]!;
  if (doc.errors.length) return { read: true, difference: `yaml reports an error: ${doc.errors[0]!.message.split('\n')[0]}` };
  if (doc.warnings.length) return { read: true, difference: `yaml warns: ${doc.warnings[0]!.message.split('\n')[0]}` };
  if (!isDeepStrictEqual(fast.range, doc.range)) return { read: true, difference: `document range ${JSON.stringify(fast.range)} (fast) vs ${JSON.stringify(doc.range)} (yaml)` };
  const nodes = sameNode(fast.contents, doc.contents, 'contents');
  if (nodes) return { read: true, difference: nodes };
  let slowValue: unknown;
  try {
    slowValue = doc.toJS();
  } catch (error) {
    return { read: true, difference: `yaml's toJS throws: ${(error as Error).message}` };
  }
  if (!sameValue(fast.toJS(), slowValue)) return { read: true, difference: `values differ: ${JSON.stringify(fast.toJS())} (fast) vs ${JSON.stringify(slowValue)} (yaml)` };
  return { read: true };
}
