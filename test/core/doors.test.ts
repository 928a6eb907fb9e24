/**
 * One core, two doors: the post-renderer (transform: YAML text in, text out)
 * and the webhook's core call (patchObject: a pod as JSON in, a JSON Patch
 * out) must decide and write the same start for the same pod. For every
 * pod template in fixtures/ and the real renders, the pod a controller would
 * create from it is fed to both: the transform of the pod's own manifest is
 * the oracle for the patched pod. The patch is applied by an independent RFC
 * 6902 implementation (Debian's python3-jsonpatch, for Debian's /usr/bin/python3).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { mergeOptions, optionsFromFile, optionsFromFlags } from '../../src/config/sources.js';
import { DEFAULT_OPTIONS, type Options } from '../../src/core/options.js';
import { applyPatch, patchObject, type JsonPatchOperation } from '../../src/core/patch.js';
import { PARSE_OPTIONS } from '../../src/core/yaml/nodes.js';
import { findWorkloadKind, templatesOf } from '../../src/core/tables/workloads.js';
import { applyWithJsonpatch, asObject, renderPod, wrappedBefore, type Plain } from '../support/doors.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

interface Corpus {
  name: string;
  options: Options;
  pods: Record<string, unknown>[];
}

function optionsFor(dir: string): Options {
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
function podsOf(value: unknown): Plain[] {
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

function corpus(): Corpus[] {
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

const cases = corpus();

describe('doors agree: patchObject (webhook) and transform (post-renderer) on the same pods', () => {
  it('the corpus holds pods, some of them wrapped', () => {
    const pods = cases.flatMap((c) => c.pods);
    expect(pods.length).toBeGreaterThan(60);
    expect(cases.filter((c) => c.pods.some((p) => patchObject(p, c.options).patch.length > 0)).length).toBeGreaterThan(20);
  });

  it('every pod: the patched pod equals the post-renderer output of the same pod, container by container', () => {
    const checked: { name: string; pod: Plain; patch: JsonPatchOperation[]; expected: unknown }[] = [];
    for (const { name, options, pods } of cases) {
      for (const pod of pods) {
        const result = patchObject(pod, options);
        const { rendered, pod: expected } = renderPod(pod, options);
        // Containers a render already wrapped stay as they are (the render's options are not the webhook's to change).
        const containers = (pod.spec as Plain).containers as unknown[];
        const wrapped = containers.map(wrappedBefore);
        if (expected === undefined) {
          // The post-renderer refuses this pod: the webhook admits the refused containers unchanged.
          const refused = new Set(rendered.containers.filter((c) => c.action === 'error').map((c) => c.container));
          for (const op of result.patch) {
            const index = Number(op.path.split('/')[3]);
            expect(refused.has(String((containers[index] as Plain).name)), `${name}: ${op.path} patched although the post-renderer refuses it`).toBe(false);
          }
          continue;
        }
        const want = JSON.parse(JSON.stringify(expected)) as Plain;
        (want.spec as Plain).containers = ((want.spec as Plain).containers as unknown[]).map((c, i) => (wrapped[i] ? containers[i] : c));
        checked.push({ name, pod, patch: result.patch, expected: want });
      }
    }
    const applied = applyWithJsonpatch(checked);
    checked.forEach(({ name, pod, patch, expected }, i) => {
      expect(applied[i], `${name}: pod ${String((pod.metadata as Plain).generateName)}`).toEqual(expected);
      expect(applyPatch(pod, patch), `${name}: our own apply agrees with jsonpatch`).toEqual(applied[i]);
    });
    expect(checked.length).toBeGreaterThan(60);
  });

  it('a pod the webhook already wrapped gets no patch (reinvocation), and neither does one the render wrapped', () => {
    let rounds = 0;
    for (const { options, pods } of cases) {
      for (const pod of pods) {
        const first = patchObject(pod, options);
        if (first.patch.length === 0) continue;
        const again = patchObject(applyPatch(pod, first.patch), options);
        expect(again.patch).toEqual([]);
        expect(again.containers.filter((c) => c.action === 'unchanged').length).toBeGreaterThan(0);
        rounds++;
      }
    }
    expect(rounds).toBeGreaterThan(20);
  });

  it('patches only command and args of containers, by JSON Pointer', () => {
    for (const { options, pods } of cases) {
      for (const pod of pods) {
        for (const op of patchObject(pod, options).patch) expect(op.path).toMatch(/^\/spec\/containers\/\d+\/(command|args)$/);
      }
    }
  });
});
