/**
 * What the admission answer may patch (docs/webhook.md, What it does to a pod). The patch touches the wrapped
 * containers' command/args and the pod's vram-preflight.io annotations, nothing else
 * (docs/webhook.md): a pod whose metadata is null or a string gets no op on /metadata, and a
 * container without a name gives no empty name in the annotations.
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_OPTIONS } from '../../src/core/index.js';
import { admit } from '../../src/webhook/admission.js';
import type { Plain } from '../../src/core/values.js';


function review(pod: Plain): string {
  return JSON.stringify({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: { uid: 'u-1', kind: { group: '', version: 'v1', kind: 'Pod' }, resource: { group: '', version: 'v1', resource: 'pods' }, operation: 'CREATE', namespace: 'n', object: pod },
  });
}

const vllm = (name: string): Plain => ({ name, image: 'vllm/vllm-openai:v0.26.0', command: ['vllm', 'serve', 'm', '--gpu-memory-utilization', '0.9'], resources: { limits: { 'nvidia.com/gpu': '1' } } });

async function patchOf(pod: Plain): Promise<{ path: string; value?: unknown }[]> {
  const answer = await admit(review(pod), { options: DEFAULT_OPTIONS });
  expect(answer.status).toBe(200);
  const response = JSON.parse(answer.body).response;
  return response.patch ? JSON.parse(Buffer.from(response.patch, 'base64').toString('utf8')) : [];
}

describe('the admission patch stays inside its set', () => {
  it.each([[null], ['a string'], [7]])('metadata %j: the containers are wrapped, no op touches /metadata', async (metadata) => {
    const patch = await patchOf({ apiVersion: 'v1', kind: 'Pod', metadata, spec: { containers: [vllm('model')] } });
    expect(patch.map((op) => op.path)).toEqual(['/spec/containers/0/command', '/spec/containers/0/args']);
  });

  it('a container without a name: no empty name in vram-preflight.io/wrapped ("" or "c1,")', async () => {
    const only = await patchOf({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p' }, spec: { containers: [vllm('')] } });
    expect(only.find((op) => op.path.startsWith('/metadata'))).toBeUndefined();
    const two = await patchOf({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p' }, spec: { containers: [vllm('c1'), vllm('')] } });
    expect(two.find((op) => op.path === '/metadata/annotations')?.value).toEqual({ 'vram-preflight.io/wrapped': 'c1' });
  });
});
