/**
 * The oracle the webhook's door is checked against: for a pod as the API
 * server holds it, the post-renderer's output for the pod's own manifest;
 * and an independent RFC 6902 implementation (Debian's python3-jsonpatch,
 * for Debian's /usr/bin/python3) to apply patchObject's patch. Shared by
 * test/core/doors.test.ts (pods built from the fixtures' templates) and
 * test/core/pods.test.ts (pods built the way operators build theirs).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { parseAllDocuments, stringify } from 'yaml';
import { mergeOptions, optionsFromFile, optionsFromFlags } from '../../src/config/sources.js';
import { DEFAULT_OPTIONS, type Options } from '../../src/core/options.js';
import { findWorkloadKind, templatesOf } from '../../src/core/tables/workloads.js';
import type { JsonPatchOperation } from '../../src/core/patch.js';
import { transform, type TransformInput, type TransformResult } from '../../src/core/transform.js';
import { PARSE_OPTIONS } from '../../src/core/yaml/nodes.js';
import { asObject, type Plain } from '../../src/core/values.js';

export { asObject, type Plain };

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

const ROOT = path.resolve(import.meta.dirname, '../..');

export interface Corpus {
  name: string;
  options: Options;
  pods: Record<string, unknown>[];
}

export function optionsFor(dir: string): Options {
  const argsFile = path.join(dir, 'args.txt');
  const args = existsSync(argsFile) ? readFileSync(argsFile, 'utf8').split('\n').filter(Boolean) : [];
  const flags: { flag: string; value: string }[] = [];
  let fromFile = {};
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    const eq = arg.indexOf('=');
    const flag = eq === -1 ? arg : arg.slice(0, eq);
    const value = eq === -1 ? args[++i]! : arg.slice(eq + 1);
    if (flag === '--config') fromFile = optionsFromFile(readFileSync(path.resolve(dir, value), 'utf8'), value);
    else flags.push({ flag, value });
  }
  return mergeOptions(fromFile, {}, optionsFromFlags(flags));
}

/** The pods a controller creates from each pod template of an object: the template's metadata and spec, as JSON. */
export function podsOf(value: unknown): Plain[] {
  const object = asObject(value);
  if (!object) return [];
  if (object.kind === 'List' && Array.isArray(object.items)) return object.items.flatMap(podsOf);
  const kind = findWorkloadKind(object.kind, object.apiVersion);
  if (!kind) return [];
  const pods: Plain[] = [];
  for (const found of templatesOf(kind, object)) {
    let at: unknown = object;
    for (const step of found.path) at = (at as Record<string | number, unknown>)[step];
    const template = asObject(at);
    if (!template) continue;
    const metadata = found.isTemplate ? (asObject(template.metadata) ?? {}) : {};
    const spec = found.isTemplate ? asObject(template.spec) : template;
    if (!spec || !Array.isArray(spec.containers)) continue;
    // As the API server holds it: JSON, so YAML anchors shared by two containers are two values.
    pods.push(JSON.parse(JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata: { ...metadata, generateName: `${String(asObject(object.metadata)?.name ?? 'pod')}-` }, spec })) as Plain);
  }
  return pods;
}

/**
 * Every pod template of fixtures/cases (with the case's options) and of the
 * real renders, as the pod a controller creates from it.
 */
export function fixturePodCorpus(): Corpus[] {
  const out: Corpus[] = [];
  const casesDir = path.join(ROOT, 'fixtures/cases');
  for (const name of readdirSync(casesDir).sort()) {
    const dir = path.join(casesDir, name);
    let options: Options;
    try {
      options = optionsFor(dir);
    } catch {
      continue; // a case about a bad option or config file has no pods to compare
    }
    const docs = parseAllDocuments(readFileSync(path.join(dir, 'input.yaml'), 'utf8'), PARSE_OPTIONS);
    if (!Array.isArray(docs) || docs.some((d) => d.errors.length)) continue;
    out.push({ name, options, pods: docs.flatMap((d) => podsOf(d.toJS({ maxAliasCount: 1000 }))) });
  }
  for (const file of readdirSync(path.join(ROOT, 'fixtures/real')).filter((f) => f.endsWith('.input.yaml'))) {
    const docs = parseAllDocuments(readFileSync(path.join(ROOT, 'fixtures/real', file), 'utf8'), PARSE_OPTIONS);
    if (!Array.isArray(docs)) continue;
    out.push({ name: `real/${file}`, options: { ...DEFAULT_OPTIONS }, pods: docs.flatMap((d) => podsOf(d.toJS())) });
  }
  return out;
}
