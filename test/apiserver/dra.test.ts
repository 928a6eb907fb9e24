/**
 * DRA against the real resource.k8s.io API: ResourceClaimTemplates and
 * ResourceClaims stored by the API server (kube-controller-manager's
 * resourceclaim controller makes each pod's claim from its template), read by
 * the webhook with a service-account token bound to the chart's own
 * ClusterRole. Without that RBAC the pod is admitted unwrapped, with the
 * reason in its annotation.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k from './harness.js';

const SUITE = 'dra';
const RUN = Date.now().toString(36);
const NS = `vpt-dra-${RUN}`;
const NS_NO_RBAC = `vpt-dra-norbac-${RUN}`;
const dir = k.tempDir(SUITE);
let tls: { caCert: string; cert: string; key: string };
let withRbac: k.WebhookProcess;
let withoutRbac: k.WebhookProcess;

/** A service account's token and the cluster CA, laid out as the kubelet mounts them in a pod. */
function credentials(name: string, ns: string): string {
  const out = path.join(dir, `sa-${name}`);
  mkdirSync(out, { recursive: true });
  writeFileSync(path.join(out, 'token'), k.kubectlOk(['create', 'token', name, '-n', ns, '--duration', '1h']).trim());
  writeFileSync(path.join(out, 'ca.crt'), readFileSync(k.cluster().caCert));
  writeFileSync(path.join(out, 'namespace'), ns);
  return out;
}

function template(name: string, deviceClassName: string): k.Plain {
  return {
    apiVersion: 'resource.k8s.io/v1',
    kind: 'ResourceClaimTemplate',
    metadata: { name },
    spec: { spec: { devices: { requests: [{ name: 'gpu', exactly: { deviceClassName, allocationMode: 'ExactCount', count: 1 } }] } } },
  };
}

function claim(name: string, deviceClassName: string): k.Plain {
  return {
    apiVersion: 'resource.k8s.io/v1',
    kind: 'ResourceClaim',
    metadata: { name },
    spec: { devices: { requests: [{ name: 'gpu', exactly: { deviceClassName, allocationMode: 'ExactCount', count: 1 } }] } },
  };
}

/** A vLLM pod whose only GPU signal is a DRA claim (no nvidia.com/gpu resource). */
function draPod(name: string, source: { resourceClaimTemplateName: string } | { resourceClaimName: string }): k.Plain {
  const pod = k.vllmPod(name);
  pod.spec.resourceClaims = [{ name: 'gpu', ...source }];
  pod.spec.containers[0].resources = { claims: [{ name: 'gpu' }] };
  return pod;
}

async function create(ns: string, pod: k.Plain): Promise<k.Plain> {
  const res = await k.api('POST', `/api/v1/namespaces/${ns}/pods`, pod);
  expect(res.status, res.text).toBe(201);
  return res.json();
}

beforeAll(async () => {
  const c = k.cluster();
  const bundle = k.buildBundle(dir);
  tls = k.servingPki(dir);
  await k.namespace(NS, { 'vram-preflight.io/inject': 'enabled', 'vram-preflight.test/suite': SUITE });
  await k.namespace(NS_NO_RBAC, { 'vram-preflight.io/inject': 'enabled', 'vram-preflight.test/suite': `${SUITE}-norbac` });

  // The chart's ClusterRole and binding, as the chart renders them, bound to this test's service account.
  const chart = k.renderChart(`vpt-dra-${RUN}`, NS);
  // The webhook's binding, and the role it names (the chart also renders the audit's ClusterRole).
  const binding = chart.find((o) => o.kind === 'ClusterRoleBinding');
  const role = chart.find((o) => o.kind === 'ClusterRole' && o.metadata.name === binding?.roleRef.name);
  const account = chart.find((o) => o.kind === 'ServiceAccount');
  expect(role && binding && account, 'the chart renders a ClusterRole, its binding and a ServiceAccount').toBeTruthy();
  for (const o of [account, role, binding]) o!.metadata.labels = { ...o!.metadata.labels, 'vram-preflight.test/run': RUN };
  k.applyObjects([account, role, binding, { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'no-rbac', namespace: NS } }]);

  const api = ['--kubernetes-api', c.api, '--registry-lookup', 'never'];
  withRbac = await k.startWebhook(bundle, tls, [...api, '--kubernetes-credentials-dir', credentials(account!.metadata.name, NS)]);
  withoutRbac = await k.startWebhook(bundle, tls, [...api, '--kubernetes-credentials-dir', credentials('no-rbac', NS)]);
  k.applyObjects([
    k.chartWebhookConfiguration(`vpt-dra-${RUN}`, SUITE, withRbac.url, tls.caCert, { labels: { 'vram-preflight.test/run': RUN } }),
    k.chartWebhookConfiguration(`vpt-dra-norbac-${RUN}`, `${SUITE}-norbac`, withoutRbac.url, tls.caCert, { labels: { 'vram-preflight.test/run': RUN } }),
  ]);
  for (const ns of [NS, NS_NO_RBAC]) {
    k.applyObjects([template('nvidia-gpu', 'gpu.nvidia.com'), template('intel-gpu', 'gpu.intel.com'), claim('shared-nvidia-gpu', 'gpu.nvidia.com')], ['-n', ns]);
  }
  await k.waitForWebhook(NS, withRbac, tls.caCert);
  await k.waitForWebhook(NS_NO_RBAC, withoutRbac, tls.caCert);
}, 40 * 60_000);

afterAll(async () => {
  k.kubectl(['delete', 'mutatingwebhookconfiguration,clusterrole,clusterrolebinding', '-l', `vram-preflight.test/run=${RUN}`, '--wait=false']);
  await Promise.all([k.deleteNamespace(NS), k.deleteNamespace(NS_NO_RBAC)]);
  await k.stopWebhook(withRbac);
  await k.stopWebhook(withoutRbac);
  k.closeApi();
  k.removeDir(dir);
});

describe('DRA claims read from the real resource.k8s.io API', () => {
  it('a pod whose GPU is a ResourceClaimTemplate of gpu.nvidia.com is wrapped; the template is read with the chart\'s RBAC', async () => {
    const pod = await create(NS, draPod('from-template', { resourceClaimTemplateName: 'nvidia-gpu' }));
    expect(k.isWrapped(pod.spec.containers[0])).toBe(true);
    expect(pod.metadata.annotations['vram-preflight.io/wrapped']).toBe('vllm');
    expect(await reads(withRbac, 'read')).toBeGreaterThan(0);
  });

  it('a pod naming a ResourceClaim of gpu.nvidia.com is wrapped', async () => {
    const pod = await create(NS, draPod('from-claim', { resourceClaimName: 'shared-nvidia-gpu' }));
    expect(k.isWrapped(pod.spec.containers[0])).toBe(true);
  });

  it('a template of another vendor\'s class leaves the pod alone, with no annotation', async () => {
    const pod = await create(NS, draPod('intel', { resourceClaimTemplateName: 'intel-gpu' }));
    expect(k.isWrapped(pod.spec.containers[0])).toBe(false);
    expect(pod.metadata.annotations?.['vram-preflight.io/not-wrapped']).toBeUndefined();
    expect(pod.metadata.annotations?.['vram-preflight.io/wrapped']).toBeUndefined();
  });

  it('a template that does not exist: admitted unwrapped, the reason in the annotation', async () => {
    const pod = await create(NS, draPod('missing', { resourceClaimTemplateName: 'no-such-template' }));
    expect(k.isWrapped(pod.spec.containers[0])).toBe(false);
    expect(pod.metadata.annotations['vram-preflight.io/not-wrapped']).toMatch(/^vllm: .*no-such-template/);
  });

  it('without the chart\'s RBAC: admitted unwrapped, the reason says the claim could not be read', async () => {
    const pod = await create(NS_NO_RBAC, draPod('forbidden', { resourceClaimTemplateName: 'nvidia-gpu' }));
    expect(k.isWrapped(pod.spec.containers[0])).toBe(false);
    expect(pod.metadata.annotations['vram-preflight.io/not-wrapped']).toMatch(/^vllm: .*nvidia-gpu/);
    expect(pod.metadata.annotations['vram-preflight.io/not-wrapped']).toMatch(/forbidden|403/i);
    expect(await reads(withoutRbac, 'failed')).toBeGreaterThan(0);
  });
});

async function reads(w: k.WebhookProcess, result: string): Promise<number> {
  const text = await k.webhookMetrics(w, tls.caCert);
  return Number(new RegExp(`^vram_preflight_webhook_dra_claim_reads_total\\{result="${result}"\\} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
}
