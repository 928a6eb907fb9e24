/**
 * Before anything happens: which pod and container (./model.ts Target), and
 * the checks that say whether restarting it proves anything, each with its
 * fix: the container is wrapped (the audit's own reading of one pod,
 * src/audit: auditPod and classifyPod), the pod is Running and Ready, and
 * the identity may do all that verify will do (SelfSubjectAccessReviews).
 */
import { auditPod, type AuditSettings } from '../audit/audit.js';
import { asObject, type Plain, PreflightError } from '../core/index.js';
import { KubernetesApiError, type KubernetesClient } from '../kubernetes/index.js';
import { seconds } from './duration.js';
import type { Check, Target } from './model.js';

export interface TargetRequest {
  namespace: string;
  pod?: string;
  selector?: string;
  container?: string;
  /** --cold-start, in ms. */
  coldStartMs?: number;
}

const podsPath = (namespace: string): string => `/api/v1/namespaces/${encodeURIComponent(namespace)}/pods`;

export const statusOf = (pod: Plain, container: string): Plain | undefined =>
  (Array.isArray(asObject(pod.status)?.containerStatuses) ? (asObject(pod.status)!.containerStatuses as unknown[]) : []).map(asObject).find((s) => s?.name === container);

/** The container's state.running.startedAt, as Target.runningSince. */
export const runningSinceOf = (status: Plain | undefined): { runningSince?: string } => {
  const at = asObject(asObject(status?.state)?.running)?.startedAt;
  return typeof at === 'string' ? { runningSince: at } : {};
};

const conditionOf = (pod: Plain, type: string): Plain | undefined =>
  (Array.isArray(asObject(pod.status)?.conditions) ? (asObject(pod.status)!.conditions as unknown[]) : []).map(asObject).find((c) => c?.type === type);

const containersOf = (pod: Plain): Plain[] => (Array.isArray(asObject(pod.spec)?.containers) ? (asObject(pod.spec)!.containers as unknown[]) : []).map((c) => asObject(c) ?? {});

/** The container's state in words: `running since T`, `waiting (CrashLoopBackOff: back-off 10s …)`, `terminated (exit 1, Error)`. */
export function describeState(status: Plain | undefined): string {
  const state = asObject(status?.state) ?? {};
  const running = asObject(state.running);
  if (running) return `running since ${String(running.startedAt ?? '?')}${status?.ready === true ? ', ready' : ', not ready'}`;
  const waiting = asObject(state.waiting);
  if (waiting) return `waiting (${String(waiting.reason ?? 'no reason')}${typeof waiting.message === 'string' ? `: ${waiting.message.slice(0, 300)}` : ''})`;
  const terminated = asObject(state.terminated);
  if (terminated) return `terminated (exit ${String(terminated.exitCode ?? '?')}${typeof terminated.reason === 'string' ? `, ${terminated.reason}` : ''})`;
  return 'not started';
}

/** The pod: named, or the one pod a selector matches (more than one: refused, listed; none: refused). */
async function findPod(client: KubernetesClient, r: TargetRequest): Promise<{ pod: Plain; chosenBy: string }> {
  if (r.pod !== undefined) {
    try {
      return { pod: await client.get(`${podsPath(r.namespace)}/${encodeURIComponent(r.pod)}`), chosenBy: '--pod' };
    } catch (error) {
      if (error instanceof KubernetesApiError && error.status === 404) throw new PreflightError('CANNOT_VERIFY', `pod ${r.namespace}/${r.pod} does not exist`, { fix: `check --pod and --namespace (kubectl -n ${r.namespace} get pods)` });
      throw error;
    }
  }
  const selector = r.selector!;
  const all = await client.list(`${podsPath(r.namespace)}?labelSelector=${encodeURIComponent(selector)}`, 100);
  // A pod being deleted, or finished, is not one to restart: its successor is.
  const live = all.filter((p) => asObject(p.metadata)?.deletionTimestamp === undefined && !['Succeeded', 'Failed'].includes(String(asObject(p.status)?.phase)));
  const names = (pods: Plain[]): string => pods.map((p) => String(asObject(p.metadata)?.name)).sort().join(', ');
  if (live.length === 0) {
    const others = all.length > 0 ? ` (only pods being deleted or finished: ${names(all)})` : '';
    throw new PreflightError('CANNOT_VERIFY', `--selector ${selector} matches no running pod in namespace ${r.namespace}${others}`, { fix: `check the selector (kubectl -n ${r.namespace} get pods -l '${selector}')` });
  }
  if (live.length > 1) {
    const listed = live.map((p) => `${String(asObject(p.metadata)?.name)} (${String(asObject(p.status)?.phase)})`).sort();
    throw new PreflightError('USAGE', `--selector ${selector} matches ${live.length} pods in namespace ${r.namespace}: ${listed.slice(0, 20).join(', ')}${listed.length > 20 ? `, and ${listed.length - 20} more` : ''}; verify restarts one pod, and does not pick one for you`, {
      fix: `name one with --pod (e.g. --pod ${listed[0]!.split(' ')[0]}), or narrow the selector`,
    });
  }
  return { pod: { ...live[0]!, apiVersion: 'v1', kind: 'Pod' }, chosenBy: `--selector ${selector} (the one pod it matches)` };
}

/** The pod's cold start: status.startTime to its Ready condition, when nothing in it has restarted since. */
function coldStartOf(pod: Plain, flagMs: number | undefined): Pick<Target, 'coldStart' | 'coldStartUnknown'> {
  if (flagMs !== undefined) return { coldStart: { ms: flagMs, source: 'flag' } };
  const status = asObject(pod.status) ?? {};
  const restarts = (Array.isArray(status.containerStatuses) ? status.containerStatuses : []).reduce((n: number, s) => n + Number(asObject(s)?.restartCount ?? 0), 0);
  const from = typeof status.startTime === 'string' ? status.startTime : undefined;
  const to = conditionOf(pod, 'Ready')?.status === 'True' ? conditionOf(pod, 'Ready')?.lastTransitionTime : undefined;
  if (restarts > 0) return { coldStartUnknown: `its containers have restarted ${restarts} time(s) since the pod started, so its Ready time is not a cold start's: give one with --cold-start` };
  if (from === undefined || typeof to !== 'string') return { coldStartUnknown: 'the pod has no startTime or Ready time: give the cold start with --cold-start' };
  return { coldStart: { ms: Math.max(0, Date.parse(to) - Date.parse(from)), source: 'pod', from, to } };
}

/** Which container: named, the pod's default-container annotation, its only one, or its only vLLM one (as the audit reads the pod). */
function chooseContainer(pod: Plain, wanted: string | undefined, targets: readonly string[]): { container: string; chosenBy: string } {
  const names = containersOf(pod).map((c) => String(c.name));
  const podName = `${String(asObject(pod.metadata)?.namespace)}/${String(asObject(pod.metadata)?.name)}`;
  if (wanted !== undefined) {
    if (!names.includes(wanted)) throw new PreflightError('USAGE', `pod ${podName} has no container "${wanted}" (its containers: ${names.join(', ')})`, { fix: `name one of them with --container${targets.length === 1 ? ` (its vLLM container: ${targets[0]})` : ''}` });
    return { container: wanted, chosenBy: '--container' };
  }
  const annotated = asObject(asObject(pod.metadata)?.annotations)?.['kubectl.kubernetes.io/default-container'];
  if (typeof annotated === 'string' && names.includes(annotated)) return { container: annotated, chosenBy: 'the pod\'s annotation kubectl.kubernetes.io/default-container' };
  if (names.length === 1) return { container: names[0]!, chosenBy: 'the pod\'s only container' };
  if (targets.length === 1) return { container: targets[0]!, chosenBy: 'the pod\'s only vLLM container' };
  throw new PreflightError('USAGE', `pod ${podName} has ${names.length} containers (${names.join(', ')}) and ${targets.length === 0 ? 'none' : targets.length} that runs vLLM on an NVIDIA GPU${targets.length > 1 ? ` (${targets.join(', ')})` : ''}`, { fix: 'name the vLLM container with --container' });
}

/** The target and the check that it is wrapped. */
export async function findTarget(client: KubernetesClient, r: TargetRequest, audit: Omit<AuditSettings, 'namespace' | 'chunkSize'>): Promise<{ target: Target; wrapped: Check; unread: string[]; pod: Plain }> {
  const { pod, chosenBy } = await findPod(client, r);
  const { containers, unread } = await auditPod(client, pod, audit);
  const { container, chosenBy: containerChosenBy } = chooseContainer(pod, r.container, containers.map((c) => c.container));
  const metadata = asObject(pod.metadata) ?? {};
  const spec = containersOf(pod).find((c) => c.name === container);
  const target: Target = {
    namespace: r.namespace,
    pod: String(metadata.name),
    uid: String(metadata.uid),
    container,
    ...(typeof spec?.image === 'string' && { image: spec.image }),
    ...(typeof asObject(pod.spec)?.nodeName === 'string' && { node: String(asObject(pod.spec)!.nodeName) }),
    podChosenBy: chosenBy,
    containerChosenBy,
    restartCount: Number(statusOf(pod, container)?.restartCount ?? 0),
    ...runningSinceOf(statusOf(pod, container)),
    ...coldStartOf(pod, r.coldStartMs),
  };
  const audited = containers.find((c) => c.container === container);
  if (!audited) {
    const vllm = containers.map((c) => c.container);
    throw new PreflightError('USAGE', `container "${container}" of pod ${r.namespace}/${target.pod} does not run vLLM on an NVIDIA GPU, as vram-preflight reads it: there is no restart race to verify there`, {
      fix: vllm.length > 0 ? `name the vLLM container: --container ${vllm[0]}` : 'name the pod of a vLLM model server on an NVIDIA GPU (vram-preflight explain shows how it reads a manifest)',
    });
  }
  const incomplete = unread.length > 0 && audited.status === 'unprotected' ? ` (why may be incomplete: verify could not read ${unread.join(' or ')}; vram-preflight audit says it in full)` : '';
  const wrapped: Check =
    audited.status === 'protected'
      ? { name: 'wrapped', ok: true, detail: `container "${container}" is wrapped: ${audited.why.detail}` }
      : {
          name: 'wrapped',
          ok: false,
          detail: `container "${container}" is not wrapped (${audited.status}): ${audited.why.detail}${incomplete}; its restart races the old engine's memory as in the incident`,
          fix: audited.fix ?? (audited.status === 'opted-out' ? `take the opt-out off the pod template (vram-preflight.io/skip), then recreate the pod` : undefined),
        };
  return { target, wrapped, unread, pod };
}

/** The pod is Running and Ready, and the container running and ready: a restart of it proves something. */
export function readyCheck(pod: Plain, container: string): Check {
  const metadata = asObject(pod.metadata) ?? {};
  const name = `${String(metadata.namespace)}/${String(metadata.name)}`;
  const phase = String(asObject(pod.status)?.phase ?? 'Unknown');
  const ready = conditionOf(pod, 'Ready')?.status === 'True';
  const status = statusOf(pod, container);
  const wait = `wait until it is (kubectl -n ${String(metadata.namespace)} wait --for=condition=Ready pod/${String(metadata.name)} --timeout=10m), then run verify again`;
  if (metadata.deletionTimestamp !== undefined) return { name: 'ready', ok: false, detail: `pod ${name} is being deleted`, fix: 'verify its successor once it is Ready' };
  if (phase !== 'Running' || !ready || status?.ready !== true || !asObject(asObject(status?.state)?.running)) {
    return { name: 'ready', ok: false, detail: `pod ${name} is not Running and Ready: phase ${phase}, Ready ${ready ? 'True' : 'False'}, container "${container}" ${describeState(status)}`, fix: wait };
  }
  return { name: 'ready', ok: true, detail: `pod ${name} is Running and Ready; container "${container}" ${describeState(status)}, restartCount ${Number(status.restartCount ?? 0)}` };
}

/** What verify does through the API, for one SelfSubjectAccessReview each. */
export const PERMISSIONS: readonly { verb: string; resource: string; subresource?: string; named: boolean; why: string }[] = [
  { verb: 'get', resource: 'pods', named: true, why: 'read the pod' },
  { verb: 'list', resource: 'pods', named: false, why: 'find it by --selector' },
  { verb: 'watch', resource: 'pods', named: true, why: 'watch it restart' },
  { verb: 'create', resource: 'pods', subresource: 'exec', named: true, why: 'send the signal (the exec WebSocket: create, from Kubernetes 1.35)' },
  { verb: 'get', resource: 'pods', subresource: 'exec', named: true, why: 'send the signal (the exec WebSocket is a GET)' },
  { verb: 'get', resource: 'pods', subresource: 'log', named: true, why: "read the preflight's lines and vLLM's error" },
  { verb: 'list', resource: 'events', named: false, why: 'find BackOff events' },
];

const describePermission = (p: (typeof PERMISSIONS)[number]): string => `${p.verb} ${p.resource}${p.subresource ? `/${p.subresource}` : ''}`;

/** Asks the API server, one SelfSubjectAccessReview a permission, whether this identity may do each. */
export async function rbacCheck(client: KubernetesClient, namespace: string, pod: string, usesSelector: boolean): Promise<Check> {
  const wanted = PERMISSIONS.filter((p) => usesSelector || !(p.verb === 'list' && p.resource === 'pods'));
  const denied: string[] = [];
  const unknown: string[] = [];
  for (const p of wanted) {
    const review = {
      apiVersion: 'authorization.k8s.io/v1',
      kind: 'SelfSubjectAccessReview',
      spec: { resourceAttributes: { namespace, verb: p.verb, resource: p.resource, ...(p.subresource && { subresource: p.subresource }), ...(p.named && { name: pod }) } },
    };
    try {
      const answer = await client.post('/apis/authorization.k8s.io/v1/selfsubjectaccessreviews', review, { maxBytes: 1 << 20 });
      if (asObject(answer.status)?.allowed !== true) denied.push(`${describePermission(p)} (to ${p.why})`);
    } catch (error) {
      if (!(error instanceof KubernetesApiError)) throw error;
      unknown.push(`${describePermission(p)}: ${error.message}`);
    }
  }
  const all = wanted.map(describePermission).join(', ');
  if (denied.length === 0 && unknown.length === 0) return { name: 'rbac', ok: true, detail: `RBAC allows all it does in namespace ${namespace}: ${all} (SelfSubjectAccessReview)` };
  const detail = [
    ...(denied.length > 0 ? [`RBAC does not allow ${denied.join(', ')} in namespace ${namespace}`] : []),
    ...(unknown.length > 0 ? [`the API server did not answer whether it allows ${unknown.join('; ')}`] : []),
  ].join('; ');
  return {
    name: 'rbac',
    ok: false,
    detail,
    fix: `bind this identity to a Role in namespace ${namespace} that allows ${all} (the Role in docs/restart-race.md, "With vram-preflight verify"); kubectl auth can-i --list -n ${namespace} shows what it may do now`,
  };
}

/** The cold start in words, for the plan. */
export function describeColdStart(target: Target): string {
  const c = target.coldStart;
  if (!c) return `unknown: ${target.coldStartUnknown}`;
  return c.source === 'flag' ? `${seconds(c.ms)} (--cold-start)` : `${seconds(c.ms)} (status.startTime ${c.from} to Ready ${c.to})`;
}
