/**
 * Reinvocation, as the API server does it: a second mutating webhook (a small
 * one of this test, ordered after ours by its configuration's name) adds a
 * vLLM container and changes the first one's env after ours has wrapped the
 * pod. The chart's `reinvocationPolicy: IfNeeded` makes the API server call
 * ours again: the added container is wrapped, the one wrapped before is not
 * wrapped twice, and the annotation names both.
 */
import { readFileSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k from './harness.js';

const SUITE = 'reinvocation';
const RUN = Date.now().toString(36);
const NS = `vpt-reinvocation-${RUN}`;
const dir = k.tempDir(SUITE);
let tls: { caCert: string; cert: string; key: string };
let ours: k.WebhookProcess;
let sidecarInjector: https.Server;
let injectorCalls = 0;

const SIDECAR = { name: 'sidecar-vllm', image: 'vllm/vllm-openai:v0.11.0', command: ['vllm', 'serve', 'Qwen/Qwen3-0.6B', '--port', '8001', '--gpu-memory-utilization', '0.4'], resources: { limits: { 'nvidia.com/gpu': '1' } } };

/** The other webhook: adds a vLLM container and an env var to the first container, once. */
function startInjector(): Promise<number> {
  sidecarInjector = https.createServer({ cert: readFileSync(tls.cert), key: readFileSync(tls.key) }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (d: Buffer) => chunks.push(d));
    req.on('end', () => {
      injectorCalls++;
      const review = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      const pod = review.request.object;
      const patch = pod.spec.containers.some((c: k.Plain) => c.name === SIDECAR.name)
        ? []
        : [
            { op: 'add', path: '/spec/containers/-', value: SIDECAR },
            { op: 'add', path: '/spec/containers/0/env', value: [{ name: 'INJECTED_BY', value: 'the-other-webhook' }] },
          ];
      const response: k.Plain = { uid: review.request.uid, allowed: true };
      if (patch.length) Object.assign(response, { patchType: 'JSONPatch', patch: Buffer.from(JSON.stringify(patch)).toString('base64') });
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response }));
    });
  });
  return new Promise((resolve) => sidecarInjector.listen(0, '127.0.0.1', () => resolve((sidecarInjector.address() as AddressInfo).port)));
}

beforeAll(async () => {
  k.cluster();
  const bundle = k.buildBundle(dir);
  tls = k.servingPki(dir);
  ours = await k.startWebhook(bundle, tls, ['--registry-lookup', 'never']);
  const injectorPort = await startInjector();
  await k.namespace(NS, { 'vram-preflight.io/inject': 'enabled', 'vram-preflight.test/suite': SUITE });
  const mwc = k.chartWebhookConfiguration(`vpt-reinvocation-${RUN}`, SUITE, ours.url, tls.caCert, { labels: { 'vram-preflight.test/run': RUN } });
  expect(mwc.webhooks[0].reinvocationPolicy, 'the chart asks to be called again').toBe('IfNeeded');
  // Configurations are called in the order of their names: "zz-…" after ours.
  const injector = {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'MutatingWebhookConfiguration',
    metadata: { name: `zz-vpt-injector-${RUN}`, labels: { 'vram-preflight.test/run': RUN } },
    webhooks: [
      {
        name: 'injector.test.vram-preflight.io',
        admissionReviewVersions: ['v1'],
        clientConfig: { url: `https://127.0.0.1:${injectorPort}/inject`, caBundle: readFileSync(tls.caCert).toString('base64') },
        rules: [{ apiGroups: [''], apiVersions: ['v1'], resources: ['pods'], operations: ['CREATE'] }],
        failurePolicy: 'Fail',
        sideEffects: 'None',
        reinvocationPolicy: 'Never',
        namespaceSelector: { matchLabels: { 'vram-preflight.test/suite': SUITE } },
        objectSelector: { matchLabels: { 'vram-preflight.test/inject-sidecar': 'yes' } },
      },
    ],
  };
  k.applyObjects([mwc, injector]);
  await k.waitForWebhook(NS, ours, tls.caCert);
  // The injector's configuration reaches the API server's informer too: wait for its first call.
  for (let i = 0; i < 300 && injectorCalls === 0; i++) {
    await k.api('POST', `/api/v1/namespaces/${NS}/pods?dryRun=All`, k.vllmPod('probe', { labels: { 'vram-preflight.test/inject-sidecar': 'yes' } }));
    if (injectorCalls === 0) await k.sleep(100);
  }
  expect(injectorCalls, 'the other webhook is called').toBeGreaterThan(0);
}, 40 * 60_000);

afterAll(async () => {
  k.kubectl(['delete', 'mutatingwebhookconfiguration', '-l', `vram-preflight.test/run=${RUN}`, '--wait=false']);
  await k.deleteNamespace(NS);
  await k.stopWebhook(ours);
  sidecarInjector?.close();
  k.closeApi();
  k.removeDir(dir);
});

describe('reinvocation by the real API server', () => {
  it('a container another webhook adds after ours is wrapped on the second call; the first is wrapped once', async () => {
    const answersBefore = await k.admissionsAnswered(ours, tls.caCert);
    const res = await k.api('POST', `/api/v1/namespaces/${NS}/pods`, k.vllmPod('reinvoked', { labels: { 'vram-preflight.test/inject-sidecar': 'yes' } }));
    expect(res.status, res.text).toBe(201);
    const pod = res.json();
    const [first, sidecar] = pod.spec.containers as k.Plain[];
    expect(sidecar!.name).toBe(SIDECAR.name);
    expect(k.isWrapped(first), 'the first container is wrapped').toBe(true);
    expect(k.isWrapped(sidecar), 'the container added after ours is wrapped on reinvocation').toBe(true);
    // Wrapped once: after the script and "--" comes the original start, not another wrapper.
    expect(first!.args.slice(1)).toEqual(['--', ...k.vllmPod('x').spec.containers[0].command]);
    expect(sidecar!.args.slice(1)).toEqual(['--', ...SIDECAR.command]);
    expect(first!.env).toEqual([{ name: 'INJECTED_BY', value: 'the-other-webhook' }]);
    expect(pod.metadata.annotations['vram-preflight.io/wrapped'].split(',').sort()).toEqual(['sidecar-vllm', 'vllm']);
    // Called twice for this pod: the first round, and the reinvocation after the other webhook changed it.
    expect((await k.admissionsAnswered(ours, tls.caCert)) - answersBefore).toBe(2);
  });

  it('without another webhook changing the pod, it is called once', async () => {
    const answersBefore = await k.admissionsAnswered(ours, tls.caCert);
    const res = await k.api('POST', `/api/v1/namespaces/${NS}/pods`, k.vllmPod('once'));
    expect(res.status, res.text).toBe(201);
    expect(k.isWrapped(res.json().spec.containers[0])).toBe(true);
    expect((await k.admissionsAnswered(ours, tls.caCert)) - answersBefore).toBe(1);
  });
});
