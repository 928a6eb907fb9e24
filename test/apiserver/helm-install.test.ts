/**
 * The post-renderer's own door against the real API server: `helm install`
 * and `helm upgrade` with `--post-renderer vram-preflight` (Helm 3 by PATH
 * name, Helm 4 as the installed plugin) into the control plane, no webhook
 * anywhere. The API server validates every rewritten object (a Deployment or
 * StatefulSet whose template it would refuse fails the install), helm's
 * release records the post-rendered manifest, and kube-controller-manager
 * makes the pods from the rewritten templates: their vLLM containers wait.
 * Helm 3's `install --dry-run=client` (which still needs a reachable API
 * server) is shown here too.
 *
 * The chart's pre-install hook Job would hold a real install until it
 * completes, which needs a kubelet: the installs run with --no-hooks; the dry
 * run shows the hooks as post-rendered.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  binDirWithBundle,
  buildArtifacts,
  bySource,
  CHART,
  CHART_NAME,
  ensureHelm,
  helm,
  helmEnv,
  helmOk,
  parseK8s,
  podContainers,
  removeTempDirs,
  splitHelmOutput,
  unwrap,
  ZOO_WRAPPED,
} from '../e2e/helpers.js';
import * as k from './harness.js';

const RUN = Date.now().toString(36);
const NS = { 3: `vpt-helm3-${RUN}`, 4: `vpt-helm4-${RUN}` } as const;
let env: Record<3 | 4, ReturnType<typeof helmEnv>>;
let madeRuntimeClass = false;

/** The manifest's documents by their template, hooks left out (the installs run without them). */
function manifestOf(text: string): Map<string, string> {
  return new Map([...bySource(splitHelmOutput(text))].filter(([source]) => !source.endsWith('/hook-job.yaml')).map(([source, doc]) => [source, doc.text.trimEnd()]));
}

/** The workloads' containers the post-renderer wrapped, by template and container (the chart's ZOO_WRAPPED, as keys). */
const WRAPPED_KEYS = Object.entries(ZOO_WRAPPED).flatMap(([template, list]) => list.map((w) => `${CHART_NAME}/${template}/${w.container}`)).sort();

beforeAll(async () => {
  const c = k.cluster();
  ensureHelm();
  const art = buildArtifacts();
  env = { 3: helmEnv({ KUBECONFIG: c.kubeconfig }), 4: helmEnv({ KUBECONFIG: c.kubeconfig }) };
  // Helm 3 looks a bare --post-renderer name up on PATH; Helm 4 takes an installed postrenderer/v1 plugin.
  env[3].PATH = `${binDirWithBundle(art.bundle)}${path.delimiter}${env[3].PATH}`;
  expect(helmOk(4, ['plugin', 'install', art.pluginDir], env[4])).toContain('Installed plugin: vram-preflight');
  for (const ns of Object.values(NS)) await k.namespace(ns, {});
  // A chart template runs its vLLM pod with runtimeClassName: nvidia, which the NVIDIA GPU Operator creates on GPU clusters;
  // without it the API server's RuntimeClass admission refuses the pod.
  // The cluster's node has one (its runc); then it stays.
  madeRuntimeClass = k.kubectl(['get', 'runtimeclass', 'nvidia']).status !== 0;
  if (madeRuntimeClass) k.applyObjects([{ apiVersion: 'node.k8s.io/v1', kind: 'RuntimeClass', metadata: { name: 'nvidia' }, handler: 'nvidia' }]);
}, 20 * 60_000);

afterAll(async () => {
  for (const ns of Object.values(NS)) await k.deleteNamespace(ns);
  // Other files count on the API server refusing pods that name a RuntimeClass it does not have.
  if (madeRuntimeClass) k.kubectl(['delete', 'runtimeclass', 'nvidia', '--wait=false']);
  k.closeApi();
  removeTempDirs();
});

describe.each([3, 4] as const)('helm %i install --post-renderer vram-preflight into the real API server', (major) => {
  const ns = () => NS[major];

  it('installs: the release records the post-rendered manifest, and every object is stored as rendered', () => {
    const installed = helm(major, ['install', 'zoo', CHART, '--namespace', ns(), '--no-hooks', '--post-renderer', 'vram-preflight', '--post-renderer-args=--timeout-seconds=900'], env[major]);
    expect(installed.status, installed.stderr).toBe(0);
    const template = helmOk(major, ['template', 'zoo', CHART, '--namespace', ns(), '--post-renderer', 'vram-preflight', '--post-renderer-args=--timeout-seconds=900'], env[major]);
    const recorded = manifestOf(helmOk(major, ['get', 'manifest', 'zoo', '--namespace', ns()], env[major]));
    expect(recorded, 'helm template and the release show the same post-rendered documents').toEqual(manifestOf(template));

    const wrapped: string[] = [];
    for (const [source, text] of recorded) {
      const rendered = parseK8s(text) as k.Plain;
      const stored = JSON.parse(k.kubectlOk(['get', `${rendered.kind}/${rendered.metadata.name}`, '--namespace', ns(), '-o', 'json']));
      const renderedContainers = podContainers(rendered);
      const storedContainers = podContainers(stored);
      expect(storedContainers.map((x) => ({ name: x.name, command: x.command, args: x.args })), source).toEqual(renderedContainers.map((x) => ({ name: x.name, command: x.command, args: x.args })));
      for (const x of storedContainers) if (k.isWrapped(x as k.Plain)) wrapped.push(`${source}/${x.name}`);
    }
    expect(wrapped.sort(), 'the vLLM containers are stored wrapped, the rest as the chart wrote them').toEqual(WRAPPED_KEYS);
    for (const key of wrapped) {
      const [source, container] = [key.slice(0, key.lastIndexOf('/')), key.slice(key.lastIndexOf('/') + 1)];
      const script = unwrap(podContainers(parseK8s(recorded.get(source)!)).find((x) => x.name === container)!).script;
      expect(script, `${key}: the post-renderer's args reached the script`).toMatch(/\b900\b/);
    }
  }, 180_000);

  it("kube-controller-manager makes the pods from the rewritten templates: the API server validates them, and their vLLM containers wait", async () => {
    const workloads = JSON.parse(k.kubectlOk(['get', 'deployments,statefulsets', '--namespace', ns(), '-o', 'json'])).items as k.Plain[];
    const replicas = workloads.reduce((n, w) => n + (w.spec.replicas ?? 1), 0);
    expect(replicas, 'the chart renders workloads').toBeGreaterThan(0);
    let pods: k.Plain[] = [];
    for (let i = 0; i < 300; i++) {
      pods = (await k.api('GET', `/api/v1/namespaces/${ns()}/pods`)).json().items;
      if (pods.length >= replicas) break;
      await k.sleep(100);
    }
    expect(pods.length, 'a pod for each replica of each workload').toBe(replicas);
    const wrapped = pods.flatMap((p) => (p.spec.containers as k.Plain[]).filter((x) => k.isWrapped(x)).map((x) => `${p.metadata.labels?.['app.kubernetes.io/component'] ?? p.metadata.generateName ?? p.metadata.name}/${x.name}`));
    expect(wrapped, 'one wrapped container per wrapped template').toHaveLength(WRAPPED_KEYS.length);
  }, 120_000);

  it('upgrades with other post-renderer args: the stored starts follow, the rest of each object stays', () => {
    const before = JSON.parse(k.kubectlOk(['get', 'deployments,statefulsets', '--namespace', ns(), '-o', 'json'])).items as k.Plain[];
    const upgraded = helm(major, ['upgrade', 'zoo', CHART, '--namespace', ns(), '--no-hooks', '--post-renderer', 'vram-preflight', '--post-renderer-args=--timeout-seconds=1200'], env[major]);
    expect(upgraded.status, upgraded.stderr).toBe(0);
    const after = JSON.parse(k.kubectlOk(['get', 'deployments,statefulsets', '--namespace', ns(), '-o', 'json'])).items as k.Plain[];
    let changed = 0;
    for (const object of after) {
      const old = before.find((o) => o.kind === object.kind && o.metadata.name === object.metadata.name)!;
      const containers = podContainers(object);
      containers.forEach((x, j) => {
        const was = podContainers(old)[j]!;
        if (k.isWrapped(x as k.Plain)) {
          expect(unwrap(x).script, `${object.metadata.name}/${x.name}`).toMatch(/\b1200\b/);
          expect(unwrap(x).start, `${object.metadata.name}/${x.name}: the same start after --`).toEqual(unwrap(was).start);
          changed++;
        } else expect({ command: x.command, args: x.args }).toEqual({ command: was.command, args: was.args });
      });
    }
    expect(changed).toBe(WRAPPED_KEYS.length);
  }, 180_000);
});

describe('helm 3 install --dry-run=client against the real API server', () => {
  it('renders the release through the post-renderer; hooks are post-rendered and shown, nothing is stored', () => {
    const ns = NS[3];
    const out = helmOk(3, ['install', 'zoo-dry', CHART, '--namespace', ns, '--dry-run=client', '--post-renderer', 'vram-preflight', '--post-renderer-args=--timeout-seconds=900'], env[3]);
    const hooksAt = out.indexOf('\nHOOKS:\n');
    const manifestAt = out.indexOf('\nMANIFEST:\n');
    expect(hooksAt).toBeGreaterThan(0);
    expect(manifestAt).toBeGreaterThan(hooksAt);
    expect([...bySource(splitHelmOutput(out.slice(hooksAt + 8, manifestAt))).keys()]).toEqual([`${CHART_NAME}/templates/hook-job.yaml`]);
    const template = helmOk(3, ['template', 'zoo-dry', CHART, '--namespace', ns, '--post-renderer', 'vram-preflight', '--post-renderer-args=--timeout-seconds=900'], env[3]);
    expect(manifestOf(out.slice(manifestAt + 11))).toEqual(manifestOf(template));
    expect(helm(3, ['status', 'zoo-dry', '--namespace', ns], env[3]).status, 'no release stored').not.toBe(0);
  }, 120_000);
});
