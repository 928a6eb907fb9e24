/**
 * `vram-preflight audit` against a real control plane (scripts/cluster.sh):
 * pods created with the real kubectl, some before and some after a
 * MutatingWebhookConfiguration taken from the chart (its selectors and
 * rules, its failurePolicy Ignore; its clientConfig pointed at a port where
 * nothing listens, so every call fails and the API server admits the pod
 * unwrapped, as while the webhook is down), wrapped pods made by the
 * post-renderer, a pod the webhook refused (its annotation), opted-out pods,
 * pods that are no target, a Deployment's pod, a DRA pod, a finished pod;
 * read as the admin and as a service account bound to the chart's audit
 * ClusterRole through in-cluster credentials.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Ajv } from 'ajv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { auditEvents, bundle, chartWebhookConfiguration, cluster, kubectl, kubectlOk, namespace, renderChart, removeTempDirs, ROOT, runBundle, sleep, tempDir, waitFor, type Cluster, type Run } from './harness.js';

const id = `${process.pid.toString(36)}${Date.now().toString(36).slice(-5)}`;
const NS = { ml: `audit-${id}-ml`, off: `audit-${id}-off`, excl: `audit-${id}-excl`, quiet: `audit-${id}-quiet` };
const MWC = `vram-preflight-audit-${id}`;
/** The suite label this file's webhook configuration requires besides the chart's (test/apiserver/harness.ts): no other file's webhook selects these namespaces. */
const SUITE = `audit-${id}`;
const SELECTED = { 'vram-preflight.io/inject': 'enabled', 'vram-preflight.test/suite': SUITE };
const ROLE = `vram-preflight-audit-${id}`;

type K8s = Record<string, any>;

let c: Cluster;
let file = '';
let env: Record<string, string> = {};

const vllmContainer = (extra: K8s = {}): K8s => ({
  name: 'model',
  image: 'vllm/vllm-openai:v0.10.1',
  args: ['--model', 'Qwen/Qwen3-8B', '--gpu-memory-utilization', '0.9'],
  resources: { limits: { 'nvidia.com/gpu': '1' } },
  ...extra,
});
const pod = (namespace: string, name: string, containers: K8s[], metadata: K8s = {}, spec: K8s = {}): K8s => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, namespace, ...metadata },
  spec: { containers, ...spec },
});
const sidecar: K8s = { name: 'metrics', image: 'busybox:1.36', command: ['sleep', 'infinity'] };
const yamlOf = (objects: K8s[]): string => objects.map((o) => stringify(o)).join('---\n');

/** The post-renderer's output for these objects: what a chart rendered through it holds. */
function postRendered(objects: K8s[]): string {
  const r = runBundle(file, [], { HOME: tempDir('render-home') }, yamlOf(objects));
  if (r.status !== 0) throw new Error(`post-renderer failed: ${r.stderr}`);
  return r.stdout;
}

function audit(args: readonly string[], extraEnv: Record<string, string> = env): Run {
  return runBundle(file, ['audit', '--registry-lookup=never', ...args], extraEnv);
}

function auditJson(args: readonly string[], extraEnv?: Record<string, string>): { run: Run; report: K8s } {
  const run = audit(['--output=json', ...args], extraEnv);
  return { run, report: run.stdout ? (JSON.parse(run.stdout) as K8s) : {} };
}

const schema = JSON.parse(readFileSync(path.join(ROOT, 'src/audit.schema.json'), 'utf8'));
const validate = new Ajv({ strict: true, allErrors: true }).compile(schema);

/** The listed containers of a report by `pod/container`, pods of a Deployment by their ReplicaSet's prefix. */
function byPod(report: K8s): any {
  return Object.fromEntries(report.containers.map((entry: K8s) => [`${entry.owner?.kind === 'ReplicaSet' ? 'served' : entry.pod}/${entry.container}`, entry]));
}

/** The chart's audit ClusterRole, as helm renders it. */
const auditRole = (): K8s => renderChart('audit', 'vram-preflight').find((o) => o.kind === 'ClusterRole' && o.metadata.name === 'audit-vram-preflight-webhook-audit')!;

/** A service account's token and the cluster's CA, laid out as the kubelet mounts them in a pod. */
function credentialsDir(serviceAccount: string): string {
  const token = kubectlOk(['-n', NS.ml, 'create', 'token', serviceAccount, '--duration=1h']).trim();
  const dir = tempDir(`sa-${serviceAccount}`);
  writeFileSync(path.join(dir, 'token'), token);
  writeFileSync(path.join(dir, 'ca.crt'), readFileSync(path.join(c.dir, 'pki/ca.crt')));
  writeFileSync(path.join(dir, 'namespace'), NS.ml);
  return dir;
}
const inCluster = (): Record<string, string> => ({ HOME: tempDir('pod-home'), KUBERNETES_SERVICE_HOST: new URL(c.api).hostname, KUBERNETES_SERVICE_PORT: new URL(c.api).port });

beforeAll(async () => {
  c = cluster();
  file = bundle();
  env = { KUBECONFIG: c.kubeconfig, HOME: tempDir('home') };
  expect(new URL(c.api).port).toMatch(/^\d+$/);

  await namespace(NS.ml, SELECTED);
  // Opted in to this suite, but not to the webhook.
  await namespace(NS.off, { 'vram-preflight.test/suite': SUITE });
  await namespace(NS.excl, SELECTED);
  await namespace(NS.quiet, SELECTED);

  // Created before the webhook configuration exists: no webhook saw it.
  kubectlOk(['create', '-f', '-'], { input: yamlOf([pod(NS.ml, 'early', [vllmContainer()])]) });
  // creationTimestamp has whole seconds: the configuration comes in a later one.
  await sleep(1100 - (Date.now() % 1000));

  // The chart's MutatingWebhookConfiguration (its rules, selectors, failurePolicy Ignore, namespace exclusions),
  // sent to a port where nothing listens, and selecting only this test's namespaces.
  const mwc = chartWebhookConfiguration(MWC, SUITE, 'https://127.0.0.1:1', c.caCert, { values: [`webhook.excludeNamespaces={${NS.excl}}`] });
  expect(mwc.webhooks[0].failurePolicy).toBe('Ignore');
  kubectlOk(['create', '-f', '-'], { input: JSON.stringify(mwc) });
  // In effect once the API server calls it: a dry-run pod's admission fails open.
  let probe = 0;
  await waitFor('the webhook configuration to be in effect', () => {
    const name = `probe-${++probe}`;
    kubectlOk(['-n', NS.ml, 'run', name, '--image=busybox', '--dry-run=server', '-o', 'name']);
    return auditEvents().events.some((e) => e.objectRef?.name === name && e.annotations?.['failed-open.mutation.webhook.admission.k8s.io/round_0_index_0'] === 'pods.vram-preflight.io');
  });

  const model = vllmContainer();
  kubectlOk(['apply', '-f', '-'], { input: yamlOf([
    {
      apiVersion: 'resource.k8s.io/v1',
      kind: 'ResourceClaimTemplate',
      metadata: { name: 'gpu', namespace: NS.ml },
      spec: { spec: { devices: { requests: [{ name: 'gpu', exactly: { deviceClassName: 'gpu.nvidia.com' } }] } } },
    },
  ]) });
  kubectlOk(['create', '-f', '-'], { input: yamlOf([
    // Admitted while the webhook was down (every call fails; failurePolicy Ignore).
    pod(NS.ml, 'down', [model, sidecar]),
    // The webhook refused it, and said why on the pod (src/webhook/admission.ts writes this annotation).
    pod(NS.ml, 'refused', [vllmContainer({ image: 'vllm/vllm-openai:team-build-7' })], {
      annotations: { 'vram-preflight.io/not-wrapped': 'model: the container gives no command, so it runs the image\'s ENTRYPOINT, which is not known for sure: no config file images entry matches; the built-in table does not place vllm/vllm-openai:team-build-7' },
    }),
    pod(NS.ml, 'labelled-skip', [model], { labels: { 'vram-preflight.io/skip': 'true' } }),
    pod(NS.ml, 'annotated-skip', [model], { annotations: { 'vram-preflight.io/skip': 'true' } }),
    pod(NS.ml, 'nginx-gpu', [{ name: 'web', image: 'nginx:1.27', resources: { limits: { 'nvidia.com/gpu': '1' } } }]),
    pod(NS.ml, 'vllm-cpu', [vllmContainer({ resources: undefined, args: ['--model', 'facebook/opt-125m'] })]),
    pod(NS.ml, 'dra', [vllmContainer({ resources: { claims: [{ name: 'gpu' }] } })], {}, { resourceClaims: [{ name: 'gpu', resourceClaimTemplateName: 'gpu' }] }),
    pod(NS.ml, 'done', [model]),
    // vLLM on a MIG instance: the core cannot wrap it, whatever admitted it.
    pod(NS.ml, 'mig', [vllmContainer({ resources: { limits: { 'nvidia.com/mig-1g.18gb': '1' } } })]),
    pod(NS.off, 'stray', [model]),
    pod(NS.excl, 'stray', [model]),
    pod(NS.quiet, 'nginx-gpu', [{ name: 'web', image: 'nginx:1.27', resources: { limits: { 'nvidia.com/gpu': '1' } } }]),
    pod(NS.quiet, 'labelled-skip', [model], { labels: { 'vram-preflight.io/skip': 'true' } }),
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'served', namespace: NS.ml },
      spec: { replicas: 1, selector: { matchLabels: { app: 'served' } }, template: { metadata: { labels: { app: 'served' } }, spec: { containers: [model] } } },
    },
  ]) });
  // Wrapped by the post-renderer at render time.
  kubectlOk(['create', '-f', '-'], { input: postRendered([pod(NS.ml, 'wrapped', [model]), pod(NS.quiet, 'wrapped', [model, sidecar])]) });
  // A finished pod (no kubelet here: its status is written as a kubelet would).
  kubectlOk(['-n', NS.ml, 'patch', 'pod', 'done', '--subresource=status', '--type=merge', '-p', '{"status":{"phase":"Succeeded"}}']);
  await waitFor("the Deployment's pod", () => kubectlOk(['-n', NS.ml, 'get', 'pods', '-l', 'app=served', '-o', 'name']).trim() !== '');
}, 600_000);

afterAll(() => {
  if (c) {
    kubectl(['delete', 'namespace', ...Object.values(NS), '--wait=false', '--ignore-not-found']);
    kubectl(['delete', 'mutatingwebhookconfiguration', MWC, `${MWC}-svc`, '--ignore-not-found']);
    kubectl(['delete', 'clusterrole,clusterrolebinding', '-l', `vram-preflight-audit-test=${id}`, '--ignore-not-found']);
  }
  removeTempDirs();
});

describe('vram-preflight audit against a real API server', () => {
  it('the pod admitted while the webhook was down was admitted by the API server failing open', () => {
    const created = auditEvents().events.find((e) => e.verb === 'create' && e.objectRef?.resource === 'pods' && e.objectRef?.namespace === NS.ml && e.objectRef?.name === 'down' && e.stage === 'ResponseComplete');
    expect(created?.responseStatus?.code).toBe(201);
    expect(created?.annotations?.['failed-open.mutation.webhook.admission.k8s.io/round_0_index_0']).toBe('pods.vram-preflight.io');
    const stored = JSON.parse(kubectlOk(['-n', NS.ml, 'get', 'pod', 'down', '-o', 'json']));
    expect(stored.spec.containers[0].command).toBeUndefined();
  });

  it('--output json: every vLLM container on an NVIDIA GPU, why it is not protected, and the fix; valid against src/audit.schema.json', () => {
    const { run, report } = auditJson(['--namespace', NS.ml, '--webhook-configuration', MWC]);
    expect(run.stderr).toBe('');
    expect(run.status).toBe(3);
    expect(validate(report), JSON.stringify(validate.errors)).toBe(true);
    expect(report).toMatchObject({ apiVersion: 'vram-preflight.io/v1', kind: 'AuditReport', result: 'unprotected', cluster: { server: c.api, context: 'vram-preflight-test', namespace: NS.ml } });
    expect(report.webhooks).toEqual([{ configuration: MWC, webhook: 'pods.vram-preflight.io', createdAt: expect.stringMatching(/Z$/), target: 'https://127.0.0.1:1/mutate', failurePolicy: 'Ignore' }]);
    const found = byPod(report);
    // Not listed: the sidecar, nginx with a GPU, vLLM on CPU, the finished pod.
    expect(Object.keys(found).sort()).toEqual(['annotated-skip/model', 'down/model', 'dra/model', 'early/model', 'labelled-skip/model', 'mig/model', 'refused/model', 'served/model', 'wrapped/model']);
    const why = Object.fromEntries(Object.entries(found as Record<string, K8s>).map(([key, entry]) => [key, `${entry.status} ${entry.why.code}`]));
    expect(why).toEqual({
      'annotated-skip/model': 'opted-out opted-out-annotation',
      'down/model': 'unprotected webhook-not-called',
      'dra/model': 'unprotected webhook-not-called',
      'early/model': 'unprotected created-before-webhook',
      'labelled-skip/model': 'opted-out opted-out-label',
      'mig/model': 'unprotected cannot-be-wrapped',
      'refused/model': 'unprotected not-wrapped',
      'served/model': 'unprotected webhook-not-called',
      'wrapped/model': 'protected wrapped',
    });
    expect(report.summary).toEqual({ pods: 11, finishedPods: 1, containers: { protected: 1, unprotected: 6, undetermined: 0, optedOut: 2 } });
    expect(found['mig/model'].decision.action).toBe('cannot-wrap');
    expect(found['mig/model'].why.detail).toMatch(/^vram-preflight cannot wrap it: on a MIG instance \(nvidia\.com\/mig-1g\.18gb=1\)/);
    expect(found['mig/model'].fix).toContain('label the pod template vram-preflight.io/skip=true');

    expect(found['down/model']).toMatchObject({ image: 'vllm/vllm-openai:v0.10.1', owner: null, decision: { action: 'wrap' } });
    expect(found['down/model'].why.detail).toContain(`${MWC} selects this pod, yet it was not wrapped and carries no vram-preflight.io annotation`);
    expect(found['down/model'].why.detail).toContain('failurePolicy Ignore admitted it unchanged');
    expect(found['down/model'].fix).toContain(`kubectl -n ${NS.ml} delete pod down`);
    const early = JSON.parse(kubectlOk(['-n', NS.ml, 'get', 'pod', 'early', '-o', 'json']));
    expect(found['early/model'].createdAt).toBe(early.metadata.creationTimestamp);
    expect(found['early/model'].why.detail).toBe(`the pod was created (${early.metadata.creationTimestamp}) before the webhook configuration ${MWC} (${report.webhooks[0].createdAt}): no webhook saw it`);
    // The webhook's reason from the annotation; the fix is decided now with this audit's config, in the webhook's
    // terms: the entry for the chart's config.images (as the webhook's own annotation gives it), not the CLI's --config.
    expect(found['refused/model'].why.detail).toBe("the webhook refused to wrap it at admission: the container gives no command, so it runs the image's ENTRYPOINT, which is not known for sure: no config file images entry matches; the built-in table does not place vllm/vllm-openai:team-build-7");
    expect(found['refused/model'].decision.action).toBe('error');
    expect(found['refused/model'].fix).toBe([
      `add this entry to config.images in the webhook chart's values (\`vram-preflight resolve vllm/vllm-openai:team-build-7\` prints this entry from the registry) and helm upgrade, then create the pod again (kubectl -n ${NS.ml} delete pod refused, then apply its manifest) so that the webhook wraps it:`,
      '  config:',
      '    images:',
      '      - repository: vllm/vllm-openai',
      '        tag: "team-build-7"',
      "        entrypoint: [...]   # the image's ENTRYPOINT",
    ].join('\n'));
    expect(found['served/model'].owner).toEqual({ kind: 'ReplicaSet', name: expect.stringMatching(/^served-[a-z0-9]+$/) });
    expect(found['served/model'].fix).toContain(`its ReplicaSet ${found['served/model'].owner.name} creates a new one, which the webhook wraps`);
    expect(found['annotated-skip/model'].decision.action).toBe('wrap');
    expect(found['annotated-skip/model'].fix).toBeNull();
    expect(found['wrapped/model'].why.detail).toBe('its start runs the vram-preflight wait (wrapped by the post-renderer at render time, or a webhook that left no annotation)');
  });

  it('text: what is not protected, why and the fix, opted-out containers apart, the same decision as the JSON', () => {
    const run = audit(['--namespace', NS.ml, '--webhook-configuration', MWC]);
    expect(run.status).toBe(3);
    expect(run.stderr).toBe('');
    const text = run.stdout;
    const lines = text.split('\n');
    expect(lines[0]).toBe(`vram-preflight ${JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')).version} audit of ${c.api}, namespace ${NS.ml} (kubeconfig ${c.kubeconfig}, context "vram-preflight-test")`);
    expect(lines[1]).toMatch(new RegExp(`^webhook: MutatingWebhookConfiguration ${MWC}, webhook pods\\.vram-preflight\\.io, created \\S+Z, calls https://127\\.0\\.0\\.1:1/mutate, failurePolicy Ignore$`));
    expect(lines[2]).toBe('11 pods (and 1 finished, not audited); 9 containers run vLLM on an NVIDIA GPU: 1 protected, 6 not protected, 0 undetermined, 2 opted out');
    const sections = lines.filter((l) => /^\S.*\(\d+\):$/.test(l));
    expect(sections).toEqual(['NOT PROTECTED: vLLM starts without waiting for GPU memory (6):', 'Opted out (listed, not counted as failures) (2):']);
    expect(text).toContain(`  ${NS.ml}/down, container "model" (image vllm/vllm-openai:v0.10.1)\n    why: ${MWC} selects this pod`);
    expect(text).toContain(`\n    fix: check that the webhook is up and reachable`);
    expect(text).toContain(`  ${NS.ml}/labelled-skip, container "model" (image vllm/vllm-openai:v0.10.1)\n    why: runs vLLM on an NVIDIA GPU, opted out by label vram-preflight.io/skip=true`);
    expect(text.trimEnd().split('\n').at(-1)).toBe('result: 6 containers not protected (exit code 3)');
    // Each not-protected container of the JSON, once, with its why and fix.
    const { report } = auditJson(['--namespace', NS.ml, '--webhook-configuration', MWC]);
    for (const entry of report.containers.filter((e: K8s) => e.status === 'unprotected')) {
      // A fix's own line breaks (the config entry the core prints) are its layout, indented under "fix:".
      expect(text).toContain(`  ${NS.ml}/${entry.pod}, container "${entry.container}" (image ${entry.image})\n    why: ${entry.why.detail}\n    fix: ${entry.fix.split('\n').join('\n         ')}\n`);
    }
  });

  it('a namespace the webhook does not select: by its labels, or excluded by name', () => {
    const off = auditJson(['--namespace', NS.off, '--webhook-configuration', MWC]);
    expect(off.run.status).toBe(3);
    expect(off.report.containers).toHaveLength(1);
    expect(off.report.containers[0]).toMatchObject({ pod: 'stray', status: 'unprotected', why: { code: 'namespace-not-selected', detail: `namespace ${NS.off} is not selected by ${MWC} (webhook pods.vram-preflight.io): its namespaceSelector wants vram-preflight.io/inject=enabled` } });
    expect(off.report.containers[0].fix).toBe(`kubectl label namespace ${NS.off} vram-preflight.io/inject=enabled, then create the pod again (kubectl -n ${NS.off} delete pod stray, then apply its manifest) so that the webhook wraps it`);
    const excl = auditJson(['--namespace', NS.excl, '--webhook-configuration', MWC]);
    expect(excl.run.status).toBe(3);
    expect(excl.report.containers[0].why).toEqual({ code: 'namespace-not-selected', detail: `namespace ${NS.excl} is not selected by ${MWC} (webhook pods.vram-preflight.io): its namespaceSelector wants kubernetes.io/metadata.name not in (kube-system, kube-node-lease, vram-preflight, ${NS.excl})` });
    expect(excl.report.containers[0].fix).toMatch(new RegExp(`^namespace ${NS.excl} is excluded by name`));
  });

  it('exit 0 where every vLLM container on an NVIDIA GPU is protected; opted-out ones are listed, not failed', () => {
    const run = audit(['-n', NS.quiet, '--webhook-configuration', MWC]);
    expect(run.stderr).toBe('');
    expect(run.status).toBe(0);
    expect(run.stdout).toContain('3 pods; 2 containers run vLLM on an NVIDIA GPU: 1 protected, 0 not protected, 0 undetermined, 1 opted out');
    expect(run.stdout).toContain(`Opted out (listed, not counted as failures) (1):\n  ${NS.quiet}/labelled-skip, container "model"`);
    expect(run.stdout).not.toContain('NOT PROTECTED');
    expect(run.stdout.trimEnd().split('\n').at(-1)).toBe('result: every vLLM container on an NVIDIA GPU is protected');
    const { report } = auditJson(['--namespace', NS.quiet, '--webhook-configuration', MWC]);
    expect(validate(report), JSON.stringify(validate.errors)).toBe(true);
    expect(report.result).toBe('protected');
  });

  it('no webhook installed: every pod the webhook did not see says so', () => {
    const { run, report } = auditJson(['--namespace', NS.ml, '--webhook-configuration', `absent-${id}`]);
    expect(run.status).toBe(3);
    expect(report.webhooks).toEqual([]);
    const why = Object.fromEntries(Object.entries(byPod(report) as Record<string, K8s>).map(([key, entry]) => [key, entry.why.code]));
    expect(why).toMatchObject({ 'down/model': 'no-webhook', 'early/model': 'no-webhook', 'served/model': 'no-webhook', 'dra/model': 'no-webhook', 'refused/model': 'not-wrapped', 'mig/model': 'cannot-be-wrapped' });
    expect(byPod(report)['down/model'].fix).toMatch(/^install it \(helm install vram-preflight deploy\/webhook, docs\/webhook\.md\), then create the pod again/);
    expect(audit(['--namespace', NS.ml, '--webhook-configuration', `absent-${id}`]).stdout.split('\n')[1]).toBe(`webhook: MutatingWebhookConfiguration absent-${id} not found`);
  });

  it('decides with the same config file and flags as the other doors', () => {
    const dir = tempDir('config');
    writeFileSync(path.join(dir, 'config.yaml'), 'images:\n  - repository: vllm/vllm-openai\n    tag: "team-build-*"\n    entrypoint: ["vllm", "serve"]\n');
    const withConfig = byPod(auditJson(['--namespace', NS.ml, '--webhook-configuration', MWC, '--config', path.join(dir, 'config.yaml')]).report);
    expect(withConfig['refused/model'].decision.action).toBe('wrap');
    expect(withConfig['refused/model'].fix).toMatch(/^the webhook would wrap it now \(with the config given to this audit/);
    // Only containers named like this are considered: the vLLM containers named "model" are no target any more.
    const { run, report } = auditJson(['--namespace', NS.ml, '--webhook-configuration', MWC, '--container-name=engine-*']);
    expect(run.status).toBe(0);
    expect(report.containers.map((e: K8s) => `${e.pod}/${e.status}`)).toEqual(['wrapped/protected']);
    // The environment too (VRAM_PREFLIGHT_CONFIG), as for the CLI and the webhook.
    expect(byPod(auditJson(['--namespace', NS.ml, '--webhook-configuration', MWC], { ...env, VRAM_PREFLIGHT_CONFIG: path.join(dir, 'config.yaml') }).report)['refused/model'].decision.action).toBe('wrap');
  });

  it('all namespaces, page by page (limit/continue): the same answer whatever the page size', () => {
    const whole = auditJson(['--webhook-configuration', MWC]);
    expect(whole.run.status).toBe(3);
    expect(validate(whole.report), JSON.stringify(validate.errors)).toBe(true);
    expect(whole.report.cluster.namespace).toBeNull();
    const ours = (report: K8s) => report.containers.filter((e: K8s) => e.namespace.startsWith(`audit-${id}-`));
    expect(new Set(ours(whole.report).map((e: K8s) => e.namespace))).toEqual(new Set([NS.ml, NS.off, NS.excl, NS.quiet]));
    const before = auditEvents().end;
    const paged = auditJson(['--webhook-configuration', MWC, '--chunk-size', '2']);
    expect(paged.run.status).toBe(3);
    expect(ours(paged.report)).toEqual(ours(whole.report));
    const lists = auditEvents(before)
      .events.filter((e) => e.verb === 'list' && e.objectRef?.resource === 'pods' && e.userAgent === 'vram-preflight-audit' && e.stage === 'ResponseComplete');
    expect(lists.length).toBeGreaterThan(1);
    expect(lists[0]!.requestURI).toBe('/api/v1/pods?limit=2');
    expect(lists.slice(1).every((e) => /^\/api\/v1\/pods\?limit=2&continue=/.test(e.requestURI))).toBe(true);
  });

  it('in a pod: the service account token and CA (KUBERNETES_SERVICE_HOST/PORT), with the chart\'s audit ClusterRole', () => {
    const role = auditRole();
    kubectlOk(['-n', NS.ml, 'create', 'serviceaccount', 'auditor']);
    kubectlOk(['apply', '-f', '-'], { input: yamlOf([
      { ...role, metadata: { name: ROLE, labels: { 'vram-preflight-audit-test': id } } },
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding', metadata: { name: ROLE, labels: { 'vram-preflight-audit-test': id } }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: ROLE }, subjects: [{ kind: 'ServiceAccount', name: 'auditor', namespace: NS.ml }] },
    ]) });
    const dir = credentialsDir('auditor');
    const args = ['--webhook-configuration', MWC, '--kubernetes-credentials-dir', dir];
    const admin = auditJson(['--webhook-configuration', MWC]).report;
    let pod = auditJson(args, inCluster());
    // RBAC takes a moment to reach the authorizer's cache.
    for (let i = 0; i < 20 && pod.run.status === 1; i++) {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 250);
      pod = auditJson(args, inCluster());
    }
    expect(pod.run.stderr).toBe('');
    expect(pod.run.status).toBe(3);
    expect(pod.report.cluster).toEqual({ server: c.api, credentials: `in-cluster service account (${dir})`, context: null, namespace: null });
    const ours = (report: K8s) => report.containers.filter((e: K8s) => e.namespace.startsWith(`audit-${id}-`));
    expect(ours(pod.report)).toEqual(ours(admin));
    // Without the flag, in a pod: the same, from the directory the kubelet mounts (absent here, so it says where it looked).
    const noMount = audit([], inCluster());
    expect(noMount.status).toBe(1);
    expect(noMount.stdout).toBe('');
    expect(noMount.stderr).toContain("error KUBECONFIG: cannot read the service account's CA /var/run/secrets/kubernetes.io/serviceaccount/ca.crt: ENOENT");
  });

  it("the chart's CronJob: its objects stored by the API server, its Job's pod made by kube-controller-manager and run as a kubelet would run it, with its own service account", async () => {
    const release = `audit-${id}`;
    const fullname = `${release}-vram-preflight-webhook`;
    const objects = renderChart(release, NS.quiet, ['audit.cronJob.enabled=true', 'config.registryLookup=never', `audit.cronJob.extraArgs={--webhook-configuration=${MWC},--output=json}`]);
    const ours = objects.filter((o) => o.metadata.name === `${fullname}-audit` || (o.kind === 'ConfigMap' && o.metadata.name === `${fullname}-config`));
    expect(ours.map((o) => o.kind).sort()).toEqual(['ClusterRole', 'ClusterRoleBinding', 'ConfigMap', 'CronJob', 'ServiceAccount']);
    for (const o of ours) o.metadata.labels = { ...o.metadata.labels, 'vram-preflight-audit-test': id };
    kubectlOk(['apply', '-f', '-'], { input: yamlOf(ours) });
    kubectlOk(['-n', NS.quiet, 'create', 'job', 'audit-now', `--from=cronjob/${fullname}-audit`]);
    let stored: K8s | undefined;
    await waitFor("the Job's pod", () => (stored = JSON.parse(kubectlOk(['-n', NS.quiet, 'get', 'pods', '-l', 'job-name=audit-now', '-o', 'json'])).items[0]) !== undefined);
    const spec = stored!.spec;
    expect(spec.serviceAccountName).toBe(`${fullname}-audit`);
    expect(spec.restartPolicy).toBe('Never');
    const container = spec.containers[0];
    // The ServiceAccount admission plugin mounted the service account's token where the audit looks for it.
    expect(container.volumeMounts.map((m: K8s) => m.mountPath)).toContain('/var/run/secrets/kubernetes.io/serviceaccount');
    expect(container.args).toEqual(['audit', '--config=/etc/vram-preflight/config/config.yaml', '--cache-dir=/tmp/vram-preflight-cache', '--timeout=300s', `--webhook-configuration=${MWC}`, '--output=json']);

    // As the kubelet runs it: the ConfigMap and the bound token as files, KUBERNETES_SERVICE_HOST/PORT. Only the
    // token's directory is named by flag: this machine has no /var/run/secrets of the pod's.
    const root = tempDir('cron-pod');
    const configMap = JSON.parse(kubectlOk(['-n', NS.quiet, 'get', 'configmap', `${fullname}-config`, '-o', 'json']));
    writeFileSync(path.join(root, 'config.yaml'), configMap.data['config.yaml']);
    const token = kubectlOk(['-n', NS.quiet, 'create', 'token', `${fullname}-audit`, '--bound-object-kind=Pod', `--bound-object-name=${stored!.metadata.name}`, `--bound-object-uid=${stored!.metadata.uid}`]).trim();
    const secrets = tempDir('cron-sa');
    writeFileSync(path.join(secrets, 'token'), token);
    writeFileSync(path.join(secrets, 'ca.crt'), readFileSync(c.caCert));
    // Each mount's path in the args to its directory here (the volumes as files of this machine).
    const mounts: [string, string][] = [['/etc/vram-preflight/config', root], ['/tmp', path.join(root, 'tmp')]];
    const args = (container.args as string[]).map((a) => {
      const mount = mounts.find(([at]) => a.includes(`=${at}/`));
      return mount ? a.replace(`=${mount[0]}/`, `=${mount[1]}/`) : a;
    });
    const everywhere = auditJson(['--webhook-configuration', MWC]).report;
    let run = runBundle(file, [...args, `--kubernetes-credentials-dir=${secrets}`], inCluster());
    for (let i = 0; i < 20 && run.status === 1; i++) {
      // RBAC takes a moment to reach the authorizer's cache.
      await sleep(250);
      run = runBundle(file, [...args, `--kubernetes-credentials-dir=${secrets}`], inCluster());
    }
    expect(run.stderr).toBe('');
    expect(run.status).toBe(3);
    const report = JSON.parse(run.stdout);
    expect(validate(report), JSON.stringify(validate.errors)).toBe(true);
    const mine = (r: K8s) => r.containers.filter((e: K8s) => e.namespace.startsWith(`audit-${id}-`));
    expect(mine(report)).toEqual(mine(everywhere));
  });

  it('RBAC: without the role the audit stops with the API server\'s reason and what it needs, nothing on stdout', () => {
    kubectlOk(['-n', NS.ml, 'create', 'serviceaccount', 'nobody']);
    const run = audit(['--webhook-configuration', MWC, '--kubernetes-credentials-dir', credentialsDir('nobody')], inCluster());
    expect(run.status).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toContain(`vram-preflight: error KUBERNETES_API: cannot get MutatingWebhookConfiguration ${MWC}: HTTP 403 Forbidden: mutatingwebhookconfigurations.admissionregistration.k8s.io "${MWC}" is forbidden: User "system:serviceaccount:${NS.ml}:nobody" cannot get resource "mutatingwebhookconfigurations"`);
    expect(run.stderr).toContain('  fix: the audit needs list on pods, get and list on namespaces and mutatingwebhookconfigurations, get on resourceclaims and resourceclaimtemplates');
  });

  it('DRA: a claim the audit may not read leaves its vLLM container undetermined, which fails the audit too', () => {
    const role = auditRole();
    const name = `${ROLE}-no-dra`;
    kubectlOk(['-n', NS.ml, 'create', 'serviceaccount', 'partial']);
    kubectlOk(['apply', '-f', '-'], { input: yamlOf([
      { ...role, metadata: { name, labels: { 'vram-preflight-audit-test': id } }, rules: role.rules.filter((r: K8s) => !r.apiGroups.includes('resource.k8s.io')) },
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding', metadata: { name, labels: { 'vram-preflight-audit-test': id } }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name }, subjects: [{ kind: 'ServiceAccount', name: 'partial', namespace: NS.ml }] },
    ]) });
    const args = ['--namespace', NS.ml, '--webhook-configuration', MWC, '--kubernetes-credentials-dir', credentialsDir('partial')];
    let run = auditJson(args, inCluster());
    for (let i = 0; i < 20 && run.run.status === 1; i++) {
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 250);
      run = auditJson(args, inCluster());
    }
    expect(run.run.status).toBe(3);
    expect(validate(run.report), JSON.stringify(validate.errors)).toBe(true);
    const dra = byPod(run.report)['dra/model'];
    expect(dra.status).toBe('undetermined');
    expect(dra.why.code).toBe('claim-unreadable');
    expect(dra.why.detail).toContain(`DRA ResourceClaimTemplate gpu: cannot read it from the Kubernetes API: HTTP 403 Forbidden: resourceclaimtemplates.resource.k8s.io "gpu" is forbidden`);
    expect(dra.fix).toContain('get on resourceclaims and resourceclaimtemplates');
    expect(run.report.summary.containers.undetermined).toBe(1);
  });

  it('usage and option errors: exit 2, nothing on stdout', () => {
    for (const [args, extraEnv, message] of [
      [['--output', 'yaml'], {}, 'error USAGE: --output is "yaml"'],
      [['--bogus'], {}, 'error USAGE: unknown option --bogus'],
      [['--report-file', 'x.json'], {}, 'error USAGE: option --report-file belongs to the post-renderer (vram-preflight --help), not to the audit: the audit writes no diagnostics or report file and reads no YAML'],
      [['--namespce', 'ml'], {}, 'error USAGE: unknown option --namespce\n  fix: did you mean --namespace?'],
      [['ml'], {}, 'error USAGE: unexpected argument "ml"'],
      [[], { VRAM_PREFLIGHT_REPORT_FILE: 'x.json' }, 'error BAD_OPTION: VRAM_PREFLIGHT_REPORT_FILE is an option of the post-renderer, not of the audit'],
      [['--chunk-size', '0'], {}, 'error USAGE: --chunk-size is "0"'],
      [['--timeout-seconds', 'soon'], {}, 'error BAD_OPTION'],
      [[], { VRAM_PREFLIGHT_BOGUS: '1' }, 'error BAD_OPTION: unknown environment variable VRAM_PREFLIGHT_BOGUS'],
      [['--kubeconfig', c.kubeconfig, '--kubernetes-credentials-dir', '/x'], {}, 'error USAGE: --kubernetes-credentials-dir asks for in-cluster credentials'],
    ] as const) {
      const run = audit(args, { ...env, ...extraEnv });
      expect(run.status, args.join(' ')).toBe(2);
      expect(run.stdout).toBe('');
      expect(run.stderr).toContain(message);
    }
    const help = runBundle(file, ['audit', '--help'], env);
    expect(help.status).toBe(0);
    expect(help.stdout).toContain('Exit codes: 0 every vLLM container on an NVIDIA GPU is protected; 3 some are not');
  });

  it("webhook-not-called: says how many of the webhook Deployment's replicas are ready, where it can read that", async () => {
    // The webhook's Deployment (two replicas, none ready: there is no kubelet) behind a Service of its name, as the chart names both.
    const name = `webhook-${id}`;
    kubectlOk(['-n', NS.off, 'create', 'deployment', name, '--image=busybox:1.36', '--replicas=2']);
    const mwc = chartWebhookConfiguration(`${MWC}-svc`, SUITE, 'https://127.0.0.1:1', c.caCert);
    for (const hook of mwc.webhooks) hook.clientConfig = { service: { namespace: NS.off, name, path: '/mutate' }, caBundle: hook.clientConfig.caBundle };
    kubectlOk(['create', '-f', '-'], { input: JSON.stringify(mwc) });
    // creationTimestamp has whole seconds: the pod comes in a later one.
    await sleep(1100 - (Date.now() % 1000));
    kubectlOk(['create', '-f', '-'], { input: yamlOf([pod(NS.ml, 'after-svc', [vllmContainer()])]) });
    const { report } = auditJson(['--namespace', NS.ml, '--webhook-configuration', `${MWC}-svc`]);
    const entry = byPod(report)['after-svc/model'];
    expect(entry.why.code).toBe('webhook-not-called');
    expect(entry.why.detail).toMatch(new RegExp(`the webhook \\(service ${NS.off}/${name}\\) was not called .*; now its Deployment ${NS.off}/${name} has 0 of 2 replicas ready$`));
    expect(entry.fix).toBe(`bring the webhook up (kubectl -n ${NS.off} describe deployment ${name}: 0 of 2 replicas ready; its pods' events and logs say why), then create the pod again (kubectl -n ${NS.ml} delete pod after-svc, then apply its manifest) so that the webhook wraps it`);
    // Where it cannot read the Deployment (the URL of the other configuration, or RBAC), it says what it said before.
    expect(byPod(auditJson(['--namespace', NS.ml, '--webhook-configuration', MWC]).report)['after-svc/model'].why.detail).not.toContain('replicas ready');
  });
});
