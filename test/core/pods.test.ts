/**
 * Pods built the way operators build theirs (fixtures/pods/: KServe raw and
 * serverless, LLMInferenceService, KubeRay, LeaderWorkerSet, llm-d
 * ModelService, KubeAI, DRA; README.md there cites the source of each
 * shape), as JSON, as the API server holds them at CREATE. For each pod:
 * - patchObject's decision per container equals the expectation written by
 *   hand from docs/detection.md (<name>.expected.json);
 * - the patch, applied by python3-jsonpatch, gives the post-renderer's output
 *   for the same pod's manifest (the oracle of test/core/doors.test.ts);
 * - the patched pod gets no patch when admitted again (reinvocation).
 *
 * Where the program's answer is not what a user would expect, the
 * expectation keeps the user's answer and a `finding` records the program's
 * answer today: the test holds the program to the recorded answer, and fails
 * when a fix changes it, so the finding is dropped in the same commit.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { DEFAULT_OPTIONS, emptyDeviceClaims, patchObject, recordDeviceClaim, type ContainerReport, type DeviceClaims, type ImageStartAnswer, type LookupFailure, type RegistryAnswers } from '../../src/core/index.js';
import { applyPatch, type JsonPatchOperation } from '../../src/core/patch.js';
import { applyWithJsonpatch, asObject, renderPod, type Plain } from '../support/doors.js';

const DIR = path.resolve(import.meta.dirname, '../../fixtures/pods');

interface Decision {
  action: ContainerReport['action'];
  /** A substring of the report's reason. */
  reason: string;
  /** A substring of one of the report's warnings. */
  warning?: string;
  utilization?: number;
}

interface ExpectedContainer extends Decision {
  /** The program disagrees with the expectation: what it answers today, and why that is not what a user expects. */
  finding?: Decision & { note: string };
}

interface ExpectedCase {
  name: string;
  registry?: Record<string, ImageStartAnswer | LookupFailure>;
  /** Pass the sibling <pod>.claims.json to patchObject (the webhook reads them from the cluster). */
  claims?: boolean;
  containers: Record<string, ExpectedContainer>;
}

interface PodCase {
  file: string;
  pod: Plain;
  expected: ExpectedCase;
  registry: RegistryAnswers;
  claimObjects: Plain[];
  claims: DeviceClaims;
}

function load(): PodCase[] {
  const files = readdirSync(DIR).filter((f) => f.endsWith('.json') && !f.endsWith('.expected.json') && !f.endsWith('.claims.json')).sort();
  return files.flatMap((file) => {
    const base = file.replace(/\.json$/, '');
    const pod = JSON.parse(readFileSync(path.join(DIR, file), 'utf8')) as Plain;
    const { cases } = JSON.parse(readFileSync(path.join(DIR, `${base}.expected.json`), 'utf8')) as { cases: ExpectedCase[] };
    return cases.map((expected) => {
      const claimObjects = expected.claims ? (JSON.parse(readFileSync(path.join(DIR, `${base}.claims.json`), 'utf8')) as Plain[]) : [];
      const claims = emptyDeviceClaims();
      for (const object of claimObjects) recordDeviceClaim(claims, object);
      return { file, pod, expected, registry: new Map(Object.entries(expected.registry ?? {})), claimObjects, claims };
    });
  });
}

const corpus = load();
const label = (c: PodCase): string => `${c.file} (${c.expected.name})`;
const decide = (c: PodCase) => patchObject(c.pod, { ...DEFAULT_OPTIONS }, { registry: c.registry, claims: c.claims });

function matches(report: ContainerReport, want: Decision): boolean {
  return (
    report.action === want.action &&
    report.reason.includes(want.reason) &&
    (want.warning === undefined || report.warnings.some((w) => w.includes(want.warning!))) &&
    (want.utilization === undefined || report.utilization?.value === want.utilization)
  );
}

const summary = (r: ContainerReport): string => JSON.stringify({ action: r.action, reason: r.reason, warnings: r.warnings, utilization: r.utilization?.value });

describe('pods built as operators build them (fixtures/pods)', () => {
  it('the corpus: every operator the issue names, the claims of the DRA pod, an expectation per pod', () => {
    const files = new Set(corpus.map((c) => c.file));
    for (const prefix of ['kserve-raw-', 'kserve-serverless-', 'kserve-llmisvc-', 'kuberay-', 'lws-', 'llmd-modelservice-', 'kubeai-', 'dra-']) {
      expect([...files].some((f) => f.startsWith(prefix)), prefix).toBe(true);
    }
    expect(corpus.some((c) => c.claimObjects.length > 0)).toBe(true);
    // As the API server holds them at CREATE: no status, no uid, a generateName.
    for (const { file, pod } of corpus) {
      expect(pod.status, file).toBeUndefined();
      expect(asObject(pod.metadata)?.uid, file).toBeUndefined();
      expect(typeof asObject(pod.metadata)?.generateName, file).toBe('string');
      expect(Array.isArray(asObject(pod.metadata)?.ownerReferences), file).toBe(true);
    }
  });

  it.each(corpus.map((c) => [label(c), c] as const))('%s: each container decided as expected', (_name, c) => {
    const result = decide(c);
    const reported = new Map(result.containers.map((r) => [r.container, r]));
    expect([...reported.keys()].sort(), 'every container is reported and expected').toEqual(Object.keys(c.expected.containers).sort());
    for (const [name, want] of Object.entries(c.expected.containers)) {
      const report = reported.get(name)!;
      if (want.finding) {
        expect(matches(report, want.finding), `${name}: the finding's answer (${want.finding.note}); the program now answers ${summary(report)}: if that is the expectation, drop the finding`).toBe(true);
        expect(matches(report, want), `${name}: finding and expectation agree: drop the finding`).toBe(false);
      } else {
        expect(matches(report, want), `${name}: want ${JSON.stringify(want)}, got ${summary(report)}`).toBe(true);
      }
    }
    // Only wrapped containers are patched, and an error is never half-applied.
    const wrapped = result.containers.filter((r) => r.action === 'wrap').length;
    expect(result.patch.length > 0).toBe(wrapped > 0);
  });

  it('the patched pod equals the post-renderer output of the same pod (python3-jsonpatch applies the patch)', () => {
    const checked: { name: string; pod: Plain; patch: JsonPatchOperation[]; expected: Plain }[] = [];
    for (const c of corpus) {
      const result = decide(c);
      const { rendered, pod: expected } = renderPod(c.pod, { ...DEFAULT_OPTIONS }, { registry: c.registry }, c.claimObjects);
      // The two doors decide each container alike, in the same words; a pod whose text names no
      // target the post-renderer copies through unparsed (docs/detection.md §1), and the webhook patches nothing.
      const byName = (list: readonly ContainerReport[]) => list.map((r) => `${r.container}: ${r.action}: ${r.reason}`).sort();
      const renderedPod = rendered.containers.filter((r) => r.workload.startsWith('Pod/'));
      if (renderedPod.length > 0) expect(byName(result.containers), label(c)).toEqual(byName(renderedPod));
      else expect(result.patch, `${label(c)}: unparsed by the post-renderer`).toEqual([]);
      if (expected === undefined) {
        // The post-renderer refuses the pod: the webhook admits it unchanged.
        expect(result.patch, label(c)).toEqual([]);
        continue;
      }
      checked.push({ name: label(c), pod: c.pod, patch: result.patch, expected });
    }
    const applied = applyWithJsonpatch(checked);
    checked.forEach(({ name, pod, patch, expected }, i) => {
      expect(applied[i], name).toEqual(expected);
      expect(applyPatch(pod, patch), `${name}: our own apply agrees with jsonpatch`).toEqual(applied[i]);
    });
    expect(checked.filter((c) => c.patch.length > 0).length).toBeGreaterThanOrEqual(10);
  });

  it('a patched pod admitted again gets no patch (reinvocation), its wrapped containers unchanged', () => {
    let rounds = 0;
    for (const c of corpus) {
      const first = decide(c);
      if (first.patch.length === 0) continue;
      const again = patchObject(applyPatch(c.pod, first.patch), { ...DEFAULT_OPTIONS }, { registry: c.registry, claims: c.claims });
      expect(again.patch, label(c)).toEqual([]);
      const wrappedFirst = first.containers.filter((r) => r.action === 'wrap').map((r) => r.container);
      expect(again.containers.filter((r) => wrappedFirst.includes(r.container)).map((r) => r.action), label(c)).toEqual(wrappedFirst.map(() => 'unchanged'));
      rounds++;
    }
    expect(rounds).toBeGreaterThanOrEqual(10);
  });

  it('the DRA pod is wrapped with its claims and not without them', () => {
    const dra = corpus.filter((c) => c.file.startsWith('dra-'));
    const withClaims = dra.filter((c) => c.claims.templates.size > 0);
    const without = dra.filter((c) => c.claims.templates.size === 0);
    expect(withClaims.length).toBeGreaterThan(0);
    expect(without.length).toBeGreaterThan(0);
    for (const c of withClaims) {
      const result = decide(c);
      expect(result.patch.length, label(c)).toBeGreaterThan(0);
      expect(result.containers.find((r) => r.action === 'wrap')?.gpuSignals.map((s) => s.signal), label(c)).toContain('dra');
    }
    for (const c of without) expect(decide(c).patch, label(c)).toEqual([]);
  });
});
