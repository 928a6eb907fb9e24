/**
 * The oracle the webhook's door is checked against: for a pod as the API
 * server holds it, the post-renderer's output for the pod's own manifest;
 * and an independent RFC 6902 implementation (Debian's python3-jsonpatch,
 * for Debian's /usr/bin/python3) to apply patchObject's patch. Shared by
 * test/core/doors.test.ts (pods built from the fixtures' templates) and
 * test/core/pods.test.ts (pods built the way operators build theirs).
 */
import { execFileSync } from 'node:child_process';
import { parseAllDocuments, stringify } from 'yaml';
import type { Options } from '../../src/core/options.js';
import type { JsonPatchOperation } from '../../src/core/patch.js';
import { transform, type TransformInput, type TransformResult } from '../../src/core/transform.js';
import { PARSE_OPTIONS } from '../../src/core/yaml/nodes.js';

export type Plain = Record<string, unknown>;

export const asObject = (v: unknown): Plain | undefined => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Plain) : undefined);

/** RFC 6902, applied by python3-jsonpatch to many (pod, patch) pairs in one process. */
export function applyWithJsonpatch(pairs: readonly { pod: unknown; patch: readonly JsonPatchOperation[] }[]): unknown[] {
  const script = 'import json,sys,jsonpatch\nprint(json.dumps([jsonpatch.apply_patch(p["pod"], p["patch"]) for p in json.load(sys.stdin)]))';
  return JSON.parse(execFileSync('/usr/bin/python3', ['-c', script], { input: JSON.stringify(pairs.map(({ pod, patch }) => ({ pod, patch }))), encoding: 'utf8', maxBuffer: 1 << 28 })) as unknown[];
}

/** A container some render or admission already wrapped (the marker every version writes). */
export function wrappedBefore(c: unknown): boolean {
  const container = asObject(c);
  return Array.isArray(container?.command) && container.command[0] === '/bin/sh' && String((container.args as unknown[] | undefined)?.[0] ?? '').startsWith('# vram-preflight ');
}

export interface RenderedPod {
  rendered: TransformResult;
  /** The post-renderer's output for the pod, as JSON; undefined when it refuses the stream. */
  pod: Plain | undefined;
}

/**
 * The post-renderer on the pod's own manifest, as a user would write it
 * (block YAML: the post-renderer does not edit flow mappings), after the
 * objects the stream would also hold (DRA claims): the pod is the last document.
 */
export function renderPod(pod: unknown, options: Options, input: TransformInput = {}, before: readonly unknown[] = []): RenderedPod {
  const stream = [...before, pod].map((doc) => stringify(doc, { lineWidth: 0 })).join('---\n');
  const rendered = transform(stream, options, input);
  if (rendered.errors.length) return { rendered, pod: undefined };
  const docs = parseAllDocuments(rendered.output, PARSE_OPTIONS) as unknown as { toJS(): unknown }[];
  return { rendered, pod: JSON.parse(JSON.stringify(docs[docs.length - 1]!.toJS())) as Plain };
}
