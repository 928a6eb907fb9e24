/**
 * The test cluster's node (scripts/cluster-node.sh; test/README.md): a real
 * kubelet with containerd and runc, kube-scheduler, kube-proxy, 4 fake GPUs
 * and the vLLM stand-in's image. A test that needs it calls node(): when the
 * node is not up it throws why (scripts/cluster.sh env says it), so the test
 * fails with the reason; it never skips.
 */
import { readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import * as k from '../apiserver/harness.js';

export interface TestNode {
  name: string;
  ip: string;
  gpus: number;
  /** The fake GPUs' ledger on this machine: one directory per GPU, named by its UUID. */
  ledger: string;
  /** Where a container finds its GPUs' ledger directories. */
  containerDir: string;
  /** vllm/vllm-openai:<tag>: the stand-in, ENTRYPOINT ["vllm", "serve"]. */
  image: string;
  /** lmcache/vllm-openai:v0.5.2: the stand-in, ENTRYPOINT ["/opt/venv/bin/vllm", "serve"]. */
  lmcacheImage: string;
  /** The namespace label under which pods land on the node. */
  optIn: { key: string; value: string };
  /** The node's logs: kubelet, containerd, kube-proxy, kube-scheduler, device plugin. */
  logs: string[];
  /** containerd's socket (ctr --address). */
  containerd: string;
}

export function node(): TestNode {
  const env = k.cluster().env;
  if (!env.VRAM_PREFLIGHT_NODE) throw new Error(`the test cluster has no node: ${env.VRAM_PREFLIGHT_NODE_ERROR ?? 'scripts/cluster.sh env says nothing of it (an older scripts/cluster.sh?)'}`);
  const [key, value] = env.VRAM_PREFLIGHT_NODE_OPT_IN_LABEL!.split('=');
  return {
    name: env.VRAM_PREFLIGHT_NODE,
    ip: env.VRAM_PREFLIGHT_NODE_IP!,
    gpus: Number(env.VRAM_PREFLIGHT_NODE_GPUS),
    ledger: env.VRAM_PREFLIGHT_FAKE_GPU_DIR!,
    containerDir: env.VRAM_PREFLIGHT_FAKE_GPU_CONTAINER_DIR!,
    image: env.VLLM_STANDIN_IMAGE!,
    lmcacheImage: env.VLLM_STANDIN_LMCACHE_IMAGE!,
    optIn: { key: key!, value: value! },
    logs: ['kubelet', 'containerd', 'kube-proxy', 'kube-scheduler', 'fakegpu-plugin'].map((name) => path.join(k.cluster().dir, `${name}.log`)),
    containerd: env.VRAM_PREFLIGHT_CONTAINERD_ADDRESS!,
  };
}

/** A namespace whose pods the node takes (its opt-in label). */
export function nodeNamespace(name: string, labels: Record<string, string> = {}): Promise<string> {
  const n = node();
  return k.namespace(name, { ...labels, [n.optIn.key]: n.optIn.value });
}

export interface LedgerHolder {
  file: string;
  pid: number;
  process: string;
  mib: number;
  release: string;
}

/** The holders of one GPU's ledger, as their files say (whether each still counts is nvidia-smi's to say). */
export function holders(uuid: string): LedgerHolder[] {
  const dir = path.join(node().ledger, uuid, 'holders');
  return readdirSync(dir)
    .filter((f) => !f.startsWith('.'))
    .flatMap((f) => {
      let text: string;
      try {
        text = readFileSync(path.join(dir, f), 'utf8');
      } catch {
        return [];
      }
      const kv = Object.fromEntries(text.split('\n').filter(Boolean).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
      return [{ file: path.join(dir, f), pid: Number(kv.pid), process: kv.process ?? '', mib: Number(kv.mib), release: kv.release ?? 'held' }];
    });
}

/** Holds memory on a GPU by hand (an entry no process holds, release=never) until release(). */
export function holdMemory(uuid: string, mib: number, name = `test-${process.pid}`): { release: () => void } {
  const file = path.join(node().ledger, uuid, 'holders', name);
  const tmp = path.join(node().ledger, uuid, 'holders', `.${name}`);
  // Whole or not at all: readers skip names that start with a dot.
  writeFileSync(tmp, `pid=0\nprocess=${name}\nmib=${mib}\nrelease=never\n`);
  renameSync(tmp, file);
  return { release: () => rmSync(file, { force: true }) };
}

/** Gives back now the memory of a GPU's stopped holders (those whose release time has not come, or never comes). */
export function releaseStopped(uuid: string): number {
  let mib = 0;
  for (const h of holders(uuid)) {
    if (h.release === 'held') continue;
    rmSync(h.file, { force: true });
    mib += h.mib;
  }
  return mib;
}

/**
 * The node's GPUs idle, for a test that needs them so: once no pod of another namespace is
 * left on the node (an earlier file's may still be ending, and an ending stand-in's memory
 * outlives it), what stopped holders still hold is given back.
 */
export async function idleGpus(except: string): Promise<void> {
  const n = node();
  await until('no pod of another test on the node', async () => {
    const pods = (await k.api('GET', `/api/v1/pods?fieldSelector=${encodeURIComponent(`spec.nodeName=${n.name}`)}`)).json().items as k.Plain[];
    return pods.every((p) => p.metadata.namespace === except) || undefined;
  }, 120_000);
  for (const uuid of readdirSync(n.ledger)) releaseStopped(uuid);
}

export interface PodView {
  uid: string;
  node: string | undefined;
  ready: boolean;
  restarts: number;
  state: k.Plain | undefined;
  lastState: k.Plain | undefined;
  raw: k.Plain;
}

/** The one pod of a Deployment (by its app label), as the API server has it now. */
export async function podOf(ns: string, app: string, container = 'model'): Promise<PodView | undefined> {
  const list = (await k.api('GET', `/api/v1/namespaces/${ns}/pods?labelSelector=${encodeURIComponent(`app=${app}`)}`)).json().items as k.Plain[];
  const pod = list.find((p) => !p.metadata.deletionTimestamp);
  if (!pod) return undefined;
  const status = ((pod.status?.containerStatuses ?? []) as k.Plain[]).find((s) => s.name === container);
  return {
    uid: pod.metadata.uid,
    node: pod.spec.nodeName,
    ready: Boolean(status?.ready),
    restarts: status?.restartCount ?? 0,
    state: status?.state,
    lastState: status?.lastState,
    raw: pod,
  };
}

/** The events of one object, oldest first. */
export async function eventsOf(ns: string, uid: string): Promise<k.Plain[]> {
  const list = (await k.api('GET', `/api/v1/namespaces/${ns}/events?fieldSelector=${encodeURIComponent(`involvedObject.uid=${uid}`)}`)).json().items as k.Plain[];
  return list.sort((a, b) => String(a.lastTimestamp ?? a.eventTime).localeCompare(String(b.lastTimestamp ?? b.eventTime)));
}

/** Waits for a condition, polling; on timeout, says what was last seen and the end of the kubelet's log. */
export async function until<T>(what: string, probe: () => Promise<T | undefined | false>, ms = 60_000): Promise<T> {
  const deadline = Date.now() + ms;
  let last: unknown;
  while (Date.now() < deadline) {
    const got = await probe();
    if (got) return got;
    last = got;
    await k.sleep(200);
  }
  let tail = '';
  try {
    tail = readFileSync(node().logs[0]!, 'utf8').split('\n').slice(-30).join('\n');
  } catch {
    // no log to show
  }
  throw new Error(`${what}: not within ${ms / 1000} s (last: ${JSON.stringify(last)})\nthe end of the kubelet's log:\n${tail}`);
}
