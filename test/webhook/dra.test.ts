/**
 * DRA: a pod names a ResourceClaimTemplate or ResourceClaim whose device
 * class says whether it is an NVIDIA GPU. The webhook reads it from the
 * Kubernetes API, here a fake API server over TLS that checks the service
 * account's bearer token and serves resource.k8s.io v1beta2 only (as
 * Kubernetes 1.33 does: v1 answers 404 and the reader moves on).
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { stringify } from 'yaml';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as h from './harness.js';

h.requireTools();

const dir = h.tempDir('dra');
const TOKEN = 'service-account-token-of-the-webhook';
let pki: h.Pki;
let api: https.Server;
let apiUrl: string;
let credentials: string;
const requests: string[] = [];
let stall = false;
const running: h.Started[] = [];

const template = (name: string, deviceClassName: string) => ({
  apiVersion: 'resource.k8s.io/v1beta2',
  kind: 'ResourceClaimTemplate',
  metadata: { name, namespace: 'models' },
  spec: { spec: { devices: { requests: [{ name: 'gpu', exactly: { deviceClassName, allocationMode: 'ExactCount', count: 1 } }] } } },
});
const OBJECTS: Record<string, unknown> = {
  '/apis/resource.k8s.io/v1beta2/namespaces/models/resourceclaimtemplates/single-gpu': template('single-gpu', 'gpu.nvidia.com'),
  '/apis/resource.k8s.io/v1beta2/namespaces/models/resourceclaimtemplates/fpga': template('fpga', 'fpga.example.com'),
  '/apis/resource.k8s.io/v1beta2/namespaces/models/resourceclaims/shared-mig': {
    apiVersion: 'resource.k8s.io/v1beta2',
    kind: 'ResourceClaim',
    metadata: { name: 'shared-mig', namespace: 'models' },
    spec: { devices: { requests: [{ name: 'mig', exactly: { deviceClassName: 'mig.nvidia.com' } }] } },
  },
};

beforeAll(async () => {
  pki = h.makePki(path.join(dir, 'pki'));
  const leaf = pki.leaf('apiserver');
  credentials = path.join(dir, 'serviceaccount');
  mkdirSync(credentials);
  writeFileSync(path.join(credentials, 'token'), `${TOKEN}\n`);
  writeFileSync(path.join(credentials, 'ca.crt'), readFileSync(pki.caCert));
  writeFileSync(path.join(credentials, 'namespace'), 'vram-preflight');
  api = https.createServer({ cert: readFileSync(leaf.cert), key: readFileSync(leaf.key) }, (req, res) => {
    requests.push(req.url!);
    if (stall) return; // never answers
    const status = (code: number, reason: string, message: string) =>
      res.writeHead(code, { 'content-type': 'application/json' }).end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', reason, message, code }));
    if (req.headers.authorization !== `Bearer ${TOKEN}`) return status(401, 'Unauthorized', 'Unauthorized');
    if (req.url!.endsWith('/forbidden')) {
      return status(403, 'Forbidden', 'resourceclaimtemplates.resource.k8s.io "forbidden" is forbidden: User "system:serviceaccount:vram-preflight:vram-preflight" cannot get resource "resourceclaimtemplates"');
    }
    const object = OBJECTS[req.url!];
    if (!object) return status(404, 'NotFound', 'the server could not find the requested resource');
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(object));
  });
  await new Promise<void>((resolve) => api.listen(0, '127.0.0.1', resolve));
  apiUrl = `https://127.0.0.1:${(api.address() as AddressInfo).port}`;
});

afterAll(async () => {
  for (const s of running) await s.webhook.drain();
  api?.closeAllConnections();
  await new Promise((r) => api?.close(r));
  h.removeDir(dir);
});

async function startWith(over: Partial<Parameters<typeof h.start>[0]> = {}): Promise<h.Started> {
  const leaf = pki.leaf(`webhook-${running.length}`);
  const s = await h.start({ certFile: leaf.cert, keyFile: leaf.key, kubernetesApi: apiUrl, kubernetesCredentialsDir: credentials, ...over });
  running.push(s);
  return s;
}

/** A vLLM pod whose only GPU signal is a DRA claim. */
function draPod(ref: Record<string, string>) {
  const vllm = h.vllmPod().spec.containers[0]!;
  return h.vllmPod({
    containers: [{ name: 'model', image: vllm.image, args: vllm.args, resources: { claims: [{ name: 'gpu' }] } }],
    spec: { resourceClaims: [{ name: 'gpu', ...ref }] },
  });
}

const admit = async (s: h.Started, pod: unknown) => {
  const answer = h.readReview(await h.h1(s.url, pki.caCert, { body: h.review(pod, { namespace: 'models' }) }));
  return { answer, patched: answer.patch ? (h.applyPatch(pod, answer.patch) as h.Pod) : (pod as h.Pod) };
};

describe('DRA claims read through the Kubernetes API', () => {
  it('a ResourceClaimTemplate of an NVIDIA device class: wrapped as the post-renderer wraps it when the template is in the render; read once, then cached', async () => {
    const s = await startWith();
    const pod = draPod({ resourceClaimTemplateName: 'single-gpu' });
    const before = requests.length;
    const { patched } = await admit(s, pod);
    expect(patched.metadata.annotations).toEqual({ 'vram-preflight.io/wrapped': 'model' });
    // v1 first (404 here), then v1beta2.
    expect(requests.slice(before)).toEqual(['/apis/resource.k8s.io/v1/namespaces/models/resourceclaimtemplates/single-gpu', '/apis/resource.k8s.io/v1beta2/namespaces/models/resourceclaimtemplates/single-gpu']);
    // The post-renderer, given the template in the same render, wraps the same way.
    const rendered = h.postRenderedStream([template('single-gpu', 'gpu.nvidia.com'), pod]).objects as h.Pod[];
    expect(rendered[1]!.spec.containers[0]!.command).toEqual(['/bin/sh', '-ec']);
    expect(patched.spec.containers).toEqual(rendered[1]!.spec.containers);
    await admit(s, draPod({ resourceClaimTemplateName: 'single-gpu' }));
    expect(requests.length).toBe(before + 2);
    expect(s.webhook.metrics.claimReads.get({ result: 'hit' })).toBe(1);
  });

  it('a ResourceClaim (MIG) is read too, at the version that answered last: a MIG instance, not wrapped, said so', async () => {
    const s = await startWith();
    const before = requests.length;
    const { patched } = await admit(s, draPod({ resourceClaimName: 'shared-mig' }));
    // nvidia-smi cannot read a MIG instance's memory (docs/restart-race.md, MIG)
    const annotations = patched.metadata.annotations as Record<string, string>;
    expect(annotations['vram-preflight.io/not-wrapped']).toMatch(/^model: on a MIG instance \(DRA ResourceClaim shared-mig → mig\.nvidia\.com\)/);
    expect(annotations['vram-preflight.io/wrapped']).toBeUndefined();
    expect(requests.slice(before)).toContain('/apis/resource.k8s.io/v1beta2/namespaces/models/resourceclaims/shared-mig');
  });

  it('a claim of another device class: not a GPU of ours, no patch, no complaint', async () => {
    const s = await startWith();
    const { answer } = await admit(s, draPod({ resourceClaimTemplateName: 'fpga' }));
    expect(answer).toEqual({ uid: expect.any(String), allowed: true });
  });

  it('a claim that cannot be read (RBAC 403, not found, no API, an API that stalls): admitted unchanged, with the reason', async () => {
    const s = await startWith();
    const forbidden = await admit(s, draPod({ resourceClaimTemplateName: 'forbidden' }));
    expect(forbidden.patched.spec).toEqual(draPod({ resourceClaimTemplateName: 'forbidden' }).spec);
    expect(forbidden.answer.warnings?.[0]).toMatch(/container "model" not wrapped, admitted unchanged: DRA ResourceClaimTemplate forbidden: .*HTTP 403/);
    expect((forbidden.patched.metadata.annotations as Record<string, string>)['vram-preflight.io/not-wrapped']).toMatch(/^model: DRA ResourceClaimTemplate forbidden: /);

    const missing = await admit(s, draPod({ resourceClaimTemplateName: 'missing' }));
    expect(missing.answer.warnings?.[0]).toMatch(/DRA ResourceClaimTemplate missing: not found in namespace models/);

    const outside = await startWith({ kubernetesApi: undefined });
    const none = await admit(outside, draPod({ resourceClaimTemplateName: 'single-gpu' }));
    expect(none.answer.warnings?.[0]).toMatch(/DRA ResourceClaimTemplate single-gpu: no Kubernetes API to read it from/);

    const slow = await startWith({ kubernetesBudgetMs: 500 });
    stall = true;
    try {
      const t0 = Date.now();
      const stalled = await admit(slow, draPod({ resourceClaimTemplateName: 'stalled' }));
      expect(Date.now() - t0).toBeLessThan(4000);
      expect(stalled.answer.warnings?.[0]).toMatch(/the Kubernetes API did not answer within 500 ms/);
    } finally {
      stall = false;
    }
  });

  it('where the API is and who the webhook is there, as controller-runtime finds it: --kubeconfig, KUBECONFIG, in-cluster; none without them', async () => {
    const config = path.join(dir, 'kubeconfig');
    writeFileSync(config, stringify({
      apiVersion: 'v1',
      kind: 'Config',
      'current-context': 'fake',
      clusters: [{ name: 'fake', cluster: { server: apiUrl, 'certificate-authority-data': readFileSync(pki.caCert).toString('base64') } }],
      users: [{ name: 'fake', user: { token: TOKEN } }],
      contexts: [{ name: 'fake', context: { cluster: 'fake', user: 'fake' } }],
    }));
    const wraps = async (s: h.Started) => (await admit(s, draPod({ resourceClaimTemplateName: 'single-gpu' }))).patched.metadata.annotations;
    const byFlag = await startWith({ kubernetesApi: undefined, kubeconfig: config });
    expect(await wraps(byFlag)).toEqual({ 'vram-preflight.io/wrapped': 'model' });
    expect(byFlag.logs.find((l) => l.msg === 'listening')).toMatchObject({ kubernetesApi: apiUrl, kubernetes: `kubeconfig ${config}, context "fake"` });
    const byEnv = await startWith({ kubernetesApi: undefined, env: { PATH: process.env.PATH, KUBECONFIG: config } });
    expect(await wraps(byEnv)).toEqual({ 'vram-preflight.io/wrapped': 'model' });
    // In a pod: KUBERNETES_SERVICE_HOST/PORT and the service account's files (here, their directory).
    const inPod = await startWith({ kubernetesApi: undefined, env: { PATH: process.env.PATH, KUBERNETES_SERVICE_HOST: '127.0.0.1', KUBERNETES_SERVICE_PORT: new URL(apiUrl).port } });
    expect(await wraps(inPod)).toEqual({ 'vram-preflight.io/wrapped': 'model' });
    expect(inPod.logs.find((l) => l.msg === 'listening')).toMatchObject({ kubernetes: `in-cluster service account (${credentials})` });
    // None of them: the webhook serves, and says why it reads no claims.
    const none = await startWith({ kubernetesApi: undefined, kubernetesCredentialsDir: undefined });
    expect(none.logs.find((l) => l.msg === 'listening')).toMatchObject({ kubernetesApi: null, kubernetes: 'none: no --kubeconfig, no KUBECONFIG, not in a pod (no KUBERNETES_SERVICE_HOST) and no ~/.kube/config' });
    // A kubeconfig that cannot be used stops it at start, with the reason.
    await expect(startWith({ kubernetesApi: undefined, kubeconfig: path.join(dir, 'absent') })).rejects.toThrow(`cannot read kubeconfig ${path.join(dir, 'absent')}: ENOENT`);
  });
});
