/**
 * The webhook's chart installed for real, by the real helm v3 and v4, into
 * the real API server: every object it renders (default values, cert-manager
 * mode with cert-manager's own CRDs, namespaceMode optOut, and every optional
 * object at once with the Prometheus Operator's CRDs) is accepted
 * (validated by the API server, admitted by its plugins, PodSecurity
 * `restricted` enforced on the release's namespace); kube-controller-manager
 * makes the Deployment's pods from the chart's template; an upgrade keeps the
 * generated certificate (helm's `lookup` of the Secret in a live cluster).
 * This is the proof that the chart is valid, in place of an offline schema.
 *
 * The MutatingWebhookConfiguration each install registers points at a
 * Service with no endpoints (no kubelet runs the webhook): the API server
 * fails open on it, as `failurePolicy: Ignore` says. Cluster tests run one
 * file at a time (vitest.config.ts), and each install is removed after it.
 */
import { spawnSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k from './harness.js';

const RUN = Date.now().toString(36);
const CHART = path.join(k.ROOT, 'deploy/webhook');

function helm(major: 3 | 4, args: readonly string[]) {
  const home = mkdtempSync(path.join(tmpdir(), 'vpt-helm-'));
  try {
    return spawnSync(path.join(k.ROOT, `.cache/helm/v${major}/helm`), [...args], {
      encoding: 'utf8',
      env: { PATH: process.env.PATH, HOME: home, HELM_CACHE_HOME: `${home}/c`, HELM_CONFIG_HOME: `${home}/f`, HELM_DATA_HOME: `${home}/d`, KUBECONFIG: k.cluster().kubeconfig },
      timeout: 120_000,
    });
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}

/** What helm says it installed: the release manifest, as objects. */
function manifest(major: 3 | 4, release: string, ns: string): k.Plain[] {
  const r = helm(major, ['get', 'manifest', release, '--namespace', ns]);
  expect(r.status, r.stderr).toBe(0);
  return k.parseYamlStream(r.stdout);
}

/** An object as the API server stores it (kubectl get -f finds its resource by discovery). */
async function stored(o: k.Plain): Promise<k.Plain | undefined> {
  const r = k.kubectl(['get', '-f', '-', '-o', 'json'], { input: JSON.stringify(o) });
  if (r.status !== 0) return undefined;
  const got = JSON.parse(r.stdout);
  return got.kind === 'List' ? got.items[0] : got;
}

/** Does the base64 PEM certificate verify against one of the base64 PEM bundle's certificates? */
function signedByBundle(certB64: string, bundleB64: string): boolean {
  const cert = new X509Certificate(Buffer.from(certB64, 'base64'));
  const pems = Buffer.from(bundleB64, 'base64').toString('utf8').match(/-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/g) ?? [];
  return pems.some((pem) => cert.verify(new X509Certificate(pem).publicKey));
}

const MODES = {
  default: [] as string[],
  certManager: ['certificates.certManager.enabled=true'],
  optOut: ['webhook.namespaceMode=optOut'],
  // Every optional object at once: the NetworkPolicy, the metrics port with a ServiceMonitor and the
  // PrometheusRule (the Prometheus Operator's own CRDs), the audit's CronJob.
  everything: ['networkPolicy.enabled=true', 'networkPolicy.apiServer[0].ipBlock.cidr=203.0.113.0/24', 'networkPolicy.metricsScrapers[0].namespaceSelector.matchLabels.team=monitoring', 'metrics.port=9090', 'metrics.serviceMonitor.enabled=true', 'metrics.prometheusRule.enabled=true', 'audit.cronJob.enabled=true'],
} as const;

const installs: { major: 3 | 4; release: string; ns: string }[] = [];

beforeAll(() => {
  k.cluster();
  // cert-manager's CRDs, from its Go module (deploy/crds), so that Certificates and Issuers are validated by their real schemas.
  k.applyObjects(k.crdsOf('github.com/cert-manager/cert-manager', k.CERT_MANAGER_VERSION, 'deploy/crds'));
  // The Prometheus Operator's CRDs (ServiceMonitor, PrometheusRule), from its Go module.
  k.applyObjects(k.crdsOf('github.com/prometheus-operator/prometheus-operator', k.PROMETHEUS_OPERATOR_VERSION, 'example/prometheus-operator-crd').filter((crd) => ['servicemonitors.monitoring.coreos.com', 'prometheusrules.monitoring.coreos.com'].includes(crd.metadata.name)));
}, 40 * 60_000);

afterAll(async () => {
  for (const { major, release, ns } of installs) {
    helm(major, ['uninstall', release, '--namespace', ns, '--wait=false']);
    await k.deleteNamespace(ns);
  }
  k.closeApi();
});

describe.each([3, 4] as const)('helm v%s installs the chart into the real API server', (major) => {
  it.each(Object.keys(MODES) as (keyof typeof MODES)[])('%s: every object accepted and stored; the Deployment\'s pods made under PodSecurity restricted', async (mode) => {
    const release = `vpt-${mode.toLowerCase()}-h${major}`;
    const ns = `vpt-chart-${mode.toLowerCase()}-h${major}-${RUN}`;
    // The namespace enforces the restricted Pod Security Standard, as docs/webhook.md says the webhook meets.
    await k.namespace(ns, { 'pod-security.kubernetes.io/enforce': 'restricted', 'pod-security.kubernetes.io/enforce-version': 'latest' });
    installs.push({ major, release, ns });
    const r = helm(major, ['install', release, CHART, '--namespace', ns, ...MODES[mode].flatMap((v) => ['--set', v])]);
    expect(r.status, r.stderr).toBe(0);
    const objects = manifest(major, release, ns);
    expect(objects.map((o) => o.kind)).toEqual(expect.arrayContaining(['Deployment', 'Service', 'ServiceAccount', 'ConfigMap', 'ClusterRole', 'ClusterRoleBinding', 'MutatingWebhookConfiguration', 'PodDisruptionBudget']));
    for (const o of objects) expect(await stored(o), `${o.kind} ${o.metadata.name} stored`).toBeDefined();

    const deployment = objects.find((o) => o.kind === 'Deployment')!;
    // kube-controller-manager: Deployment -> ReplicaSet -> Pods, each admitted by PodSecurity restricted.
    let pods: k.Plain[] = [];
    for (let i = 0; i < 300 && pods.length < deployment.spec.replicas; i++) {
      const selector = Object.entries(deployment.spec.selector.matchLabels as Record<string, string>).map(([key, v]) => `${key}=${v}`).join(',');
      pods = (await k.api('GET', `/api/v1/namespaces/${ns}/pods?labelSelector=${encodeURIComponent(selector)}`)).json().items;
      if (pods.length < deployment.spec.replicas) await k.sleep(100);
    }
    expect(pods.length, 'the ReplicaSet controller made the replicas the chart asks for').toBe(deployment.spec.replicas);
    const events = (await k.api('GET', `/api/v1/namespaces/${ns}/events`)).json().items as k.Plain[];
    expect(events.filter((e) => /forbidden|violates PodSecurity/i.test(String(e.message))).map((e) => e.message)).toEqual([]);

    const mwc = await stored(objects.find((o) => o.kind === 'MutatingWebhookConfiguration')!);
    const hook = mwc!.webhooks[0];
    expect(hook.clientConfig.service).toMatchObject({ namespace: ns, path: '/mutate' });
    expect(await stored({ apiVersion: 'v1', kind: 'Service', metadata: { name: hook.clientConfig.service.name, namespace: ns } }), 'the webhook names the chart\'s Service').toBeDefined();
    if (mode === 'everything') expect(objects.map((o) => o.kind)).toEqual(expect.arrayContaining(['NetworkPolicy', 'ServiceMonitor', 'PrometheusRule', 'CronJob']));
    if (mode === 'certManager') {
      expect(objects.filter((o) => o.apiVersion === 'cert-manager.io/v1').map((o) => o.kind).sort()).toEqual(['Certificate', 'Certificate', 'Issuer', 'Issuer']);
      expect(mwc!.metadata.annotations['cert-manager.io/inject-ca-from']).toMatch(new RegExp(`^${ns}/`));
    } else {
      // The serving certificate the webhook mounts is signed by a CA the caBundle trusts (the bundle may hold more: rotation).
      const serving = objects.find((o) => o.kind === 'Secret' && o.type === 'kubernetes.io/tls')!;
      const secret = await stored(serving);
      expect(signedByBundle(secret!.data['tls.crt'], hook.clientConfig.caBundle), 'the serving certificate verifies against the caBundle').toBe(true);
    }
  }, 120_000);

  it('an upgrade keeps the generated certificate: lookup finds the Secret in the live cluster', async () => {
    const release = `vpt-default-h${major}`;
    const ns = installs.find((i) => i.release === release)!.ns;
    const before = manifest(major, release, ns);
    const secretBefore = (await stored(before.find((o) => o.kind === 'Secret' && o.type === 'kubernetes.io/tls')!))!;
    const bundleBefore = (await stored(before.find((o) => o.kind === 'MutatingWebhookConfiguration')!))!.webhooks[0].clientConfig.caBundle;
    const r = helm(major, ['upgrade', release, CHART, '--namespace', ns, '--set', 'webhook.timeoutSeconds=4']);
    expect(r.status, r.stderr).toBe(0);
    const after = manifest(major, release, ns);
    const secretAfter = (await stored(after.find((o) => o.kind === 'Secret' && o.type === 'kubernetes.io/tls')!))!;
    expect(secretAfter.data).toEqual(secretBefore.data);
    const mwc = (await stored(after.find((o) => o.kind === 'MutatingWebhookConfiguration')!))!;
    expect(mwc.webhooks[0].timeoutSeconds, 'the upgrade was applied').toBe(4);
    expect(mwc.webhooks[0].clientConfig.caBundle, 'the caBundle is the same').toBe(bundleBefore);
  }, 120_000);
});
