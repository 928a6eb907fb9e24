/**
 * One core, two doors: the post-renderer (transform: YAML text in, text out)
 * and the webhook's core call (patchObject: a pod as JSON in, a JSON Patch
 * out) must decide and write the same start for the same pod. For every
 * pod template in fixtures/ and the real renders, the pod a controller would
 * create from it is fed to both: the transform of the pod's own manifest is
 * the oracle for the patched pod. The patch is applied by an independent RFC
 * 6902 implementation (Debian's python3-jsonpatch, for Debian's /usr/bin/python3).
 */
import { describe, expect, it } from 'vitest';
import { applyPatch, patchObject, type JsonPatchOperation } from '../../src/core/patch.js';
import { applyWithJsonpatch, fixturePodCorpus, renderPod, wrappedBefore, type Plain } from '../support/doors.js';

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
