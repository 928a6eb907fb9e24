/**
 * The first test on the real node (scripts/cluster-node.sh): two Deployments
 * of the vLLM stand-in (the image vllm/vllm-openai as the node's containerd
 * holds it, `nvidia.com/gpu: 1`), one as a chart renders it, one wrapped by
 * the built vram-preflight CLI, run side by side:
 *
 * - kube-scheduler places each on the node; the kubelet finds the image in
 *   containerd's store, runc runs it under the pod's cgroup memory limit, the
 *   readinessProbe makes it Ready, and the device plugin gave it one fake GPU;
 * - kube-proxy leads this host to it through a Service's cluster IP, and the
 *   pod to the API server through the kubernetes Service;
 * - `kubectl exec … -- kill -TERM 1` makes the kubelet restart it in place
 *   (restartCount + 1, the same pod), while the old engine's memory is not
 *   given back (VLLM_STANDIN_RELEASE_SECONDS=600: the incident's slow
 *   reclaim, until the test releases it);
 * - the plain one fails vLLM's own check, and the kubelet records it as an
 *   operator sees it: the error in `kubectl logs --previous`, a BackOff event;
 * - the wrapped one waits (the preflight's line in its log), and starts on
 *   that first attempt once the memory is released: Ready, restartCount 1,
 *   no BackOff.
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import * as k from '../apiserver/harness.js';
import { eventsOf, holders, idleGpus, node, nodeNamespace, podOf, releaseStopped, until, type PodView } from './harness.js';

const RUN = Date.now().toString(36);
const NS = `vpt-node-${RUN}`;
const dir = k.tempDir('node');

/** A Deployment of the stand-in as a vLLM chart renders one (args only: the image's ENTRYPOINT starts vLLM). */
function deployment(name: string, image: string): k.Plain {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name, namespace: NS },
    spec: {
      replicas: 1,
      strategy: { type: 'Recreate' },
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels: { app: name } },
        spec: {
          runtimeClassName: 'nvidia',
          nodeSelector: { 'nvidia.com/gpu.present': 'true' },
          terminationGracePeriodSeconds: 5,
          containers: [
            {
              name: 'model',
              image,
              imagePullPolicy: 'IfNotPresent',
              args: ['Qwen/Qwen3-0.6B', '--gpu-memory-utilization', '0.9', '--port', '8000', '--max-model-len', '4096'],
              // As good as never for this test (it gives the memory back itself), yet not forever if it is interrupted.
              env: [{ name: 'VLLM_STANDIN_RELEASE_SECONDS', value: '600' }],
              ports: [{ name: 'http', containerPort: 8000 }],
              resources: { requests: { cpu: '10m', memory: '64Mi' }, limits: { memory: '256Mi', 'nvidia.com/gpu': '1' } },
              readinessProbe: { httpGet: { path: '/health', port: 8000 }, periodSeconds: 1, failureThreshold: 1 },
            },
          ],
        },
      },
    },
  };
}

/** The built CLI on a manifest (block YAML, as helm renders): the wrapped manifest, as `helm --post-renderer` would install it. */
function wrap(manifest: k.Plain, bundle: string): k.Plain {
  const r = spawnSync(process.execPath, [bundle, '--poll-interval-seconds', '0.5'], { input: stringify(manifest), encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`vram-preflight exited ${r.status}: ${r.stderr}`);
  return k.parseYamlStream(r.stdout)[0]!;
}

function exec(pod: PodView, command: string[]): string {
  return k.kubectlOk(['exec', '-n', NS, pod.raw.metadata.name, '-c', 'model', '--', ...command]);
}

let plain: PodView;
let wrapped: PodView;
/** What each pod's container says of itself: its GPU, its cgroup memory limit, its nvidia-smi. */
let inside: Record<string, { uuid: string; limit: string; smi: string }>;

const readyPod = (app: string) =>
  until(`${app} Ready`, async () => {
    const pod = await podOf(NS, app);
    return pod?.ready ? pod : undefined;
  });

beforeAll(async () => {
  const n = node();
  await nodeNamespace(NS);
  await idleGpus(NS);
  // The plain one starts while the CLI is built for the other.
  k.applyObjects([deployment('vllm-plain', n.image), { apiVersion: 'v1', kind: 'Service', metadata: { name: 'vllm-plain', namespace: NS }, spec: { selector: { app: 'vllm-plain' }, ports: [{ port: 80, targetPort: 8000 }] } }]);
  const wrappedDeployment = wrap(deployment('vllm-wrapped', n.image), k.buildBundle(dir));
  expect(k.isWrapped(wrappedDeployment.spec.template.spec.containers[0]), 'the CLI wraps the stand-in as it wraps vLLM').toBe(true);
  k.applyObjects([wrappedDeployment]);
  [plain, wrapped] = await Promise.all([readyPod('vllm-plain'), readyPod('vllm-wrapped')]);
  expect([plain.restarts, wrapped.restarts], 'both started at the first attempt on idle GPUs').toEqual([0, 0]);
  const script = 'echo "$NVIDIA_VISIBLE_DEVICES"; cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes; nvidia-smi --query-gpu=index,uuid,memory.total,memory.used,memory.free,memory.reserved --format=csv,noheader,nounits';
  inside = Object.fromEntries([plain, wrapped].map((p) => {
    const [uuid, limit, smi] = exec(p, ['sh', '-c', script]).trim().split('\n');
    return [p.raw.metadata.name, { uuid: uuid!, limit: limit!, smi: smi! }];
  }));
}, 180_000);

afterAll(async () => {
  // The engines keep their memory for long after their pods: once the pods are gone, give it
  // back, or the next pods on these GPUs would find them full.
  k.kubectl(['delete', 'deployments', '--all', '-n', NS, '--wait=true', '--timeout=60s']);
  await until('the pods gone', async () => (await k.api('GET', `/api/v1/namespaces/${NS}/pods`)).json().items.length === 0).catch(() => undefined);
  await idleGpus(NS);
  await k.deleteNamespace(NS);
  k.closeApi();
  k.removeDir(dir);
});

describe('the vLLM stand-in on a real node: kubelet, containerd, runc, kube-scheduler', () => {
  it('is scheduled onto the node, runs from containerd\'s store as a real container under its cgroup limit, with one GPU of the device plugin', async () => {
    const n = node();
    for (const pod of [plain, wrapped]) {
      expect(pod.node).toBe(n.name);
      const reasons = (await eventsOf(NS, pod.uid)).map((e) => `${e.reason}: ${e.message ?? e.note}`);
      expect(reasons).toContainEqual(`Scheduled: Successfully assigned ${NS}/${pod.raw.metadata.name} to ${n.name}`);
      // Found in containerd's store, as imported (the kubelet adds "and can be accessed by the pod" where it checks credentials).
      expect(reasons.filter((r) => r.startsWith(`Pulled: Container image "${n.image}" already present on machine`))).toHaveLength(1);
      const { uuid, limit, smi } = inside[pod.raw.metadata.name]!;
      // runc put it in the pod's memory cgroup with the container's limit (cgroup v1 here; v2 elsewhere).
      expect(limit).toBe(String(256 * 1024 * 1024));
      // The kubelet gave it one GPU: the device plugin's env and that GPU's ledger, which its nvidia-smi reads.
      expect(uuid).toMatch(/^GPU-[0-9a-f-]+$/);
      const [index, shown, total, used, free, reserved] = smi.split(', ');
      expect({ index, shown }).toEqual({ index: '0', shown: uuid });
      // The engine holds what vLLM asks: ceil((total - reserved) x 0.9) MiB (rounded up from bytes).
      const cuda = Number(total) - Number(reserved);
      expect(Number(used)).toBe(Math.ceil(Math.ceil(cuda * 1024 * 1024 * 0.9) / (1024 * 1024)));
      expect(Number(free)).toBe(cuda - Number(used));
    }
    expect(inside[plain.raw.metadata.name]!.uuid, 'two pods, two GPUs').not.toBe(inside[wrapped.raw.metadata.name]!.uuid);
  });

  it('one node per machine: the lock file names this checkout\'s state and a live holder, and another checkout cannot take it', () => {
    // The lock is the file's inode: a file replaced at the path (sed -i, mv) is one nobody
    // holds, and a second checkout's node then wipes this one's bridge and processes.
    const lockPath = '/run/lock/vram-preflight-test-node.lock';
    const owner = spawnSync('cat', [lockPath], { encoding: 'utf8' }).stdout;
    const holder = /lock held by pid (\d+) /.exec(owner)?.[1];
    expect(owner.startsWith(`${path.join(k.ROOT, '.cache/cluster/state')}, lock held by pid `), owner).toBe(true);
    expect(holder, owner).toBeDefined();
    expect(spawnSync('kill', ['-0', holder!]).status, `the holder ${holder} is alive`).toBe(0);
    const other = spawnSync('flock', ['-n', lockPath, 'true']);
    expect(other.status, 'flock -n on the lock file, as another checkout\'s up takes it').toBe(1);
  });

  it('kube-proxy: this host reaches the stand-in at its Service\'s cluster IP, and the pod reaches the API server at the kubernetes Service', async () => {
    const clusterIp = (await k.api('GET', `/api/v1/namespaces/${NS}/services/vllm-plain`)).json().spec.clusterIP as string;
    expect(clusterIp.startsWith(`${k.SERVICE_NET}.`)).toBe(true);
    // The endpoint is published once the pod is Ready; kube-proxy writes its rules at most once a second.
    const status = await until(`http://${clusterIp}/health`, () => fetch(`http://${clusterIp}/health`, { signal: AbortSignal.timeout(2000) }).then((r) => r.status, () => undefined), 30_000);
    expect(status).toBe(200);
    // In-cluster: KUBERNETES_SERVICE_HOST is the kubernetes Service's cluster IP, which kube-proxy leads to the API server
    // (a TCP connection: busybox's wget has no TLS the API server accepts).
    expect(exec(plain, ['sh', '-c', 'echo $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT; nc -w 5 $KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT </dev/null && echo reached']).trim().split('\n')).toEqual([`${k.SERVICE_NET}.1:443`, 'reached']);
  });

  it('kill -TERM 1: the kubelet restarts each in place; without the wrap vLLM\'s check fails (logs --previous, BackOff), with it the start waits and succeeds at once', async () => {
    for (const pod of [plain, wrapped]) exec(pod, ['kill', '-TERM', '1']);
    await Promise.all([plainFails(), wrappedWaitsThenStarts()]);
  }, 120_000);
});

/** Plain: the same pod, restarted in place, and its new vLLM fails the check against the old engine's memory. */
async function plainFails(): Promise<void> {
  const failed = await until('the plain pod\'s restarted container fails', async () => {
    const pod = await podOf(NS, 'vllm-plain');
    // The kubelet shows the failed container as terminated until its back-off ends, then as the last state.
    return pod && pod.restarts >= 1 && (pod.state?.terminated?.exitCode === 1 || pod.lastState?.terminated?.exitCode === 1) ? pod : undefined;
  });
  expect(failed.uid).toBe(plain.uid);
  // As an operator reads it. (Asked again if the kubelet is between two attempts.)
  const vllmError = /ValueError: Free memory on device cuda:0 \(\d+\.\d+\/79\.33 GiB\) on startup is less than desired GPU memory utilization \(0\.9, 71\.4 GiB\)\. Decrease GPU memory utilization or reduce GPU memory used by other processes\./;
  const previous = await until('kubectl logs --previous shows vLLM\'s error', async () => {
    const r = k.kubectl(['logs', '-n', NS, failed.raw.metadata.name, '-c', 'model', '--previous']);
    return r.status === 0 && vllmError.test(r.stdout) ? r.stdout : undefined;
  }, 30_000);
  expect(previous).toMatch(/^RuntimeError: Engine core initialization failed\. See root cause above\./m);
  await until('a BackOff event for the plain pod', async () =>
    (await eventsOf(NS, failed.uid)).find((e) => e.reason === 'BackOff' && /Back-off restarting failed container model/.test(e.message ?? '')));
}

/** Wrapped: the same pod, restarted in place; its preflight waits for the old engine's memory, then starts vLLM. */
async function wrappedWaitsThenStarts(): Promise<void> {
  const waiting = await until('the wrapped pod\'s preflight waits', async () => {
    const pod = await podOf(NS, 'vllm-wrapped');
    if (!pod || pod.restarts !== 1 || !pod.state?.running) return undefined;
    const log = k.kubectl(['logs', '-n', NS, pod.raw.metadata.name, '-c', 'model']).stdout;
    return /vram-preflight: waiting for GPU memory before starting vLLM: GPU 0 has \d+ MiB free, needs \d+ MiB/.test(log) ? pod : undefined;
  });
  expect(waiting.uid).toBe(wrapped.uid);
  const uuid = inside[waiting.raw.metadata.name]!.uuid;
  const stopped = holders(uuid).filter((h) => h.release !== 'held');
  expect(stopped.map((h) => h.process), 'the old engine still holds its memory').toEqual(['VLLM::EngineCore']);
  // The memory comes back: the wait ends, and vLLM starts on this first attempt.
  expect(releaseStopped(uuid)).toBe(stopped[0]!.mib);
  const started = await readyPod('vllm-wrapped');
  expect({ uid: started.uid, restarts: started.restarts }).toEqual({ uid: wrapped.uid, restarts: 1 });
  expect((await eventsOf(NS, started.uid)).filter((e) => e.reason === 'BackOff')).toEqual([]);
  const log = k.kubectlOk(['logs', '-n', NS, started.raw.metadata.name, '-c', 'model']);
  expect(log).toMatch(/Starting vLLM API server on http:\/\/0\.0\.0\.0:8000/);
  expect(log).not.toMatch(/ValueError/);
}
