/**
 * One core, three doors: the post-renderer (transform: YAML text in, text out)
 * and the webhook's core call (patchObject: a pod as JSON in, a JSON Patch
 * out) must decide and write the same start for the same pod. For every
 * pod template in fixtures/ and the real renders, the pod a controller would
 * create from it is fed to both: the transform of the pod's own manifest is
 * the oracle for the patched pod. The patch is applied by an independent RFC
 * 6902 implementation (Debian's python3-jsonpatch, for Debian's /usr/bin/python3).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments, stringify } from 'yaml';
import { DEFAULT_OPTIONS, emptyDeviceClaims, recordDeviceClaim, type ContainerReport, type Options } from '../../src/core/index.js';
import { applyPatch, patchObject, type JsonPatchOperation, type PatchResult } from '../../src/core/patch.js';
import { PARSE_OPTIONS } from '../../src/core/yaml/nodes.js';
import { admit as admitReview, shortReason } from '../../src/webhook/admission.js';
import { admitText } from '../../src/webhook/admit-command.js';
import { applyWithJsonpatch, asObject, fixturePodCorpus, optionsFor, renderPod, wrappedBefore, type Plain } from '../support/doors.js';
import { runCli } from './run-cli.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

const cases = fixturePodCorpus();

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

/**
 * One corpus, three doors: the post-renderer (the CLI, or transform on a
 * pod's own manifest), `vram-preflight admit` (admitText, after its options
 * are read) and the webhook's admission handler (admit() in
 * src/webhook/admission.ts, given the review the API server would send).
 * Registry lookups are off at every door (the same answers everywhere).
 */
describe('three doors: the post-renderer, admit and the webhook decide and refuse alike', () => {
  const never = (options: Options): Options => ({ ...options, registryLookup: 'never' });

  async function admitDoor(text: string, options: Options, output?: 'json' | 'yaml') {
    let stdout = '';
    let stderr = '';
    const code = await admitText(text, options, { stdout: { write: (t: string) => (stdout += t) }, stderr: { write: (t: string) => (stderr += t) }, env: {} }, output);
    return { code, stdout, stderr };
  }

  const reviewOf = (pod: Plain): string =>
    JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: { uid: 'u', kind: { group: '', version: 'v1', kind: 'Pod' }, resource: { group: '', version: 'v1', resource: 'pods' }, namespace: 'default', operation: 'CREATE', object: pod } });

  /** The webhook's handler, with the cluster's DRA claims (the objects given), and the core's decision it was told. */
  async function webhookDoor(pod: Plain, options: Options, claimObjects: readonly Plain[]) {
    const known = emptyDeviceClaims();
    for (const object of claimObjects) recordDeviceClaim(known, object);
    let decided: PatchResult | undefined;
    const admission = await admitReview(reviewOf(pod), {
      options,
      readClaims: async (_namespace, references) => ({
        claims: known,
        failures: new Map(references.filter((r) => !(r.kind === 'ResourceClaim' ? known.claims : known.templates).has(r.name)).map((r) => [`${r.kind} ${r.name}`, 'not found'])),
      }),
      onDecided: (result) => (decided = result),
    });
    const patch = JSON.parse(admission.body).response.patch as string | undefined;
    return { admission, decided: decided!, patch: patch ? (JSON.parse(Buffer.from(patch, 'base64').toString('utf8')) as JsonPatchOperation[]) : [] };
  }

  /**
   * A container's decision, as the core reports it: what every door starts from. A refusal by its
   * code: a JSON number and a plain YAML 8000 are refused for one reason, said of what each door read.
   */
  const decisions = (reports: readonly ContainerReport[]) => Object.fromEntries(reports.map((r) => [r.container, r.action === 'error' ? `error ${r.error?.code}` : `${r.action}: ${r.reason}`]));
  const errorCodes = (stderr: string) => [...stderr.matchAll(/^vram-preflight: error ([A-Z_]+)/gm)].map((m) => m[1]).sort();
  const warningLines = (stderr: string) => stderr.split('\n').filter((l) => l.startsWith('vram-preflight: warning: '));

  /** Pods from the fixtures' pod templates and fixtures/pods (with the DRA claims a case gives), each with its options. */
  function podCorpus(): { name: string; options: Options; pod: Plain; claimObjects: Plain[] }[] {
    const out = cases.flatMap(({ name, options, pods }) => pods.map((pod, i) => ({ name: `${name} #${i}`, options: never(options), pod, claimObjects: [] as Plain[] })));
    const dir = path.join(ROOT, 'fixtures/pods');
    for (const file of readdirSync(dir).filter((f) => f.endsWith('.json') && !f.endsWith('.expected.json') && !f.endsWith('.claims.json'))) {
      const pod = JSON.parse(readFileSync(path.join(dir, file), 'utf8')) as Plain;
      const claimsFile = path.join(dir, file.replace(/\.json$/, '.claims.json'));
      out.push({ name: `pods/${file}`, options: never({ ...DEFAULT_OPTIONS }), pod, claimObjects: [] });
      if (existsSync(claimsFile)) out.push({ name: `pods/${file} with its claims`, options: never({ ...DEFAULT_OPTIONS }), pod, claimObjects: JSON.parse(readFileSync(claimsFile, 'utf8')) as Plain[] });
    }
    return out;
  }

  it('every pod: one decision per container at all three doors, the same refusal, and the same pod let in', async () => {
    const corpus = podCorpus();
    expect(corpus.length).toBeGreaterThan(120);
    const oracle: { name: string; pod: Plain; patch: JsonPatchOperation[] }[] = [];
    const admitted: unknown[] = [];
    let wrappedPods = 0;
    let refusedPods = 0;
    for (const { name, options, pod, claimObjects } of corpus) {
      const post = renderPod(pod, options, {}, claimObjects);
      const hook = await webhookDoor(pod, options, claimObjects);
      const stream = [...claimObjects, pod].map((doc) => stringify(doc, { lineWidth: 0 })).join('---\n');
      const viaYaml = await admitDoor(stream, options);
      // The post-renderer and the webhook: the core's decision, container by container (a start a render
      // already wrapped is the webhook's to keep, the render's to write again with its options).
      const kept = new Set(((pod.spec as Plain).containers as Plain[]).filter(wrappedBefore).map((c) => String(c.name)));
      const postDecisions = decisions(post.rendered.containers.filter((r) => r.workload.startsWith('Pod/') && !kept.has(r.container)));
      const hookDecisions = decisions(hook.decided.containers.filter((r) => !kept.has(r.container)));
      if (post.rendered.containers.length > 0) expect(hookDecisions, `${name}: the webhook decides as the post-renderer`).toEqual(postDecisions);
      else expect(hook.patch, `${name}: nothing the post-renderer reads, nothing the webhook patches`).toEqual([]);
      // The same refusal: what the post-renderer refuses, the webhook admits unchanged with its reason, and admit exits 1 with it.
      // (A DRA claim the webhook could not read is its refusal alone: the post-renderer, which has no cluster, skips with a warning.)
      const refusedByPost = post.rendered.containers.filter((r) => r.action === 'error' || r.action === 'cannot-wrap').map((r) => r.container).sort();
      const refusedByHook = hook.admission.refused.filter((r) => !hook.decided.containers.some((c) => c.container === r.container && c.unknownDeviceClaims)).map((r) => r.container).sort();
      expect(refusedByHook, `${name}: refused by the webhook as by the post-renderer`).toEqual(refusedByPost);
      if (post.pod === undefined && post.rendered.containers.length > 0) expect(refusedByPost.length, `${name}: ${post.rendered.errors.map((e) => e.code).join(', ')}`).toBeGreaterThan(0);
      if (hook.admission.refused.length > 0) {
        refusedPods++;
        expect(viaYaml.code, `${name}: admit refuses what the webhook refuses\n${viaYaml.stderr}`).toBe(1);
        expect(viaYaml.stdout).toBe('');
        // Its reason is the one the post-renderer gives for the same YAML (the webhook's own where only the webhook refuses: a claim it could not read).
        // (A claim that could not be read: where it was looked for differs, the cluster or stdin; the claim is named.)
        const said = (r: { container: string; reason: string }, reason: string): string =>
          hook.decided.containers.some((c) => c.container === r.container && c.unknownDeviceClaims) ? `vram-preflight: ${r.container}: DRA ` : `vram-preflight: ${r.container}: ${shortReason(reason, 600)}`;
        for (const r of hook.admission.refused) {
          const reason = post.rendered.containers.find((c) => c.container === r.container && c.workload.startsWith('Pod/') && c.action === 'error')?.reason ?? r.reason;
          expect(viaYaml.stderr, `${name}: the reason`).toContain(said(r, reason));
        }
        if (claimObjects.length === 0) {
          const viaJson = await admitDoor(JSON.stringify(pod), options);
          expect(viaJson.code, `${name} (JSON)`).toBe(1);
          for (const r of hook.admission.refused) expect(viaJson.stderr, `${name}: the webhook's reason, for the same JSON`).toContain(said(r, r.reason));
        }
        continue;
      }
      expect(viaYaml.code, `${name}\n${viaYaml.stderr}`).toBe(0);
      const answered = parseAllDocuments(viaYaml.stdout, PARSE_OPTIONS).map((d) => d.toJS() as Plain);
      expect(answered).toHaveLength(claimObjects.length + 1);
      admitted.push(answered[answered.length - 1]);
      oracle.push({ name, pod, patch: hook.patch });
      if (hook.patch.length > 0) wrappedPods++;
      // The containers the post-renderer wrote are the ones admit lets in.
      if (post.pod) {
        const want = ((post.pod.spec as Plain).containers as Plain[]).map((c, i) => (kept.has(String(c.name)) ? ((pod.spec as Plain).containers as unknown[])[i] : c));
        expect((answered[answered.length - 1]!.spec as Plain).containers, `${name}: admit's containers are the post-renderer's`).toEqual(want);
      }
      // The same pod in JSON, where no claim needs the stream: the same answer.
      if (claimObjects.length === 0) {
        const viaJson = await admitDoor(JSON.stringify(pod), options);
        expect(viaJson.code, `${name} (JSON)\n${viaJson.stderr}`).toBe(0);
        expect(JSON.parse(viaJson.stdout), `${name}: JSON in, JSON out, the same pod`).toEqual(answered[answered.length - 1]);
      }
    }
    // The pod admit lets in is the webhook's patch applied by an independent RFC 6902 implementation.
    const applied = applyWithJsonpatch(oracle);
    oracle.forEach(({ name }, i) => expect(admitted[i], `${name}: admit's pod is the webhook's patch applied`).toEqual(JSON.parse(JSON.stringify(applied[i]))));
    expect(wrappedPods).toBeGreaterThan(60);
    expect(refusedPods).toBeGreaterThan(5);
  }, 240_000);

  it('every stream (fixtures/cases, fixtures/real): admit writes what the post-renderer writes, byte for byte, or refuses with the same errors', async () => {
    const dirs = readdirSync(path.join(ROOT, 'fixtures/cases')).sort().map((name) => ({ name, dir: path.join(ROOT, 'fixtures/cases', name), input: path.join(ROOT, 'fixtures/cases', name, 'input.yaml') }));
    const real = readdirSync(path.join(ROOT, 'fixtures/real')).filter((f) => f.endsWith('.input.yaml')).map((f) => ({ name: `real/${f}`, dir: path.join(ROOT, 'fixtures/real'), input: path.join(ROOT, 'fixtures/real', f) }));
    let same = 0;
    let refused = 0;
    for (const { name, dir, input } of [...dirs, ...real]) {
      if (!existsSync(input)) continue;
      const argsFile = path.join(dir, 'args.txt');
      const argv = [...(name.startsWith('real/') || !existsSync(argsFile) ? [] : readFileSync(argsFile, 'utf8').split('\n').filter(Boolean)), '--registry-lookup=never'];
      const text = readFileSync(input, 'utf8');
      const post = await runCli(argv, text, { cwd: dir });
      if (post.code === 2) continue; // an option the case is about, not an object
      const options = never(name.startsWith('real/') ? { ...DEFAULT_OPTIONS } : optionsFor(dir));
      const viaAdmit = await admitDoor(text, options);
      const docs = parseAllDocuments(text, PARSE_OPTIONS);
      const values = (Array.isArray(docs) ? docs : []).map((d) => {
        try {
          return d.errors.length > 0 ? undefined : asObject(d.toJS({ maxAliasCount: 1000 }));
        } catch {
          return undefined;
        }
      });
      if (!values.some((v) => typeof v?.kind === 'string')) {
        // Nothing admit could answer: it says so, where the post-renderer passes the stream through.
        expect(viaAdmit.code, name).toBe(1);
        expect(viaAdmit.stderr).toMatch(/nothing on stdin|no Kubernetes object/);
        continue;
      }
      if (values.some((v) => v?.kind === 'Pod' || v?.kind === 'AdmissionReview')) {
        // Pods are the webhook's to answer (annotated): the pod test above holds them to the post-renderer's decision.
        expect(viaAdmit.code === 0, `${name}\n${viaAdmit.stderr}`).toBe(post.code === 0);
        continue;
      }
      expect(viaAdmit.code, `${name}\n${viaAdmit.stderr}\n--- post-renderer:\n${post.stderr}`).toBe(post.code);
      expect(warningLines(viaAdmit.stderr), `${name}: the same warnings`).toEqual(warningLines(post.stderr));
      if (post.code === 0) {
        expect(viaAdmit.stdout, `${name}: admit writes the post-renderer's output`).toBe(post.stdout);
        same++;
      } else {
        expect(viaAdmit.stdout).toBe('');
        expect(errorCodes(viaAdmit.stderr), `${name}: the same errors`).toEqual(errorCodes(post.stderr));
        refused++;
      }
    }
    expect(same).toBeGreaterThan(40);
    expect(refused).toBeGreaterThan(15);
  }, 240_000);
});
