/**
 * The audit of one cluster: read the webhook configurations (and how many
 * of the chart's webhook replicas are ready), the namespaces and the pods,
 * read the DRA claims the pods name, decide every pod with the core
 * (patchObject, as the webhook does, with the same options), and say for each
 * container that runs vLLM on an NVIDIA GPU whether it is protected and why
 * not (./classify.ts).
 *
 * Its memory is bounded whatever the cluster holds: pods are read one at a
 * time as the list streams in (src/kubernetes), each cut at once to what the
 * core and the audit read (podFields), and decided; what stays is one line
 * per listed container. Pods whose images only their registry can place wait
 * for a lookup of all such images, in batches of at most WAITING_LIMIT bytes
 * (each image is looked up once), and are then decided again.
 */
import { ANNOTATION_SKIP, asObject, claimReferences, emptyDeviceClaims, type ImageStartAnswer, type LookupFailure, type Options, patchObject, type Plain, PreflightError, recordDeviceClaim, type RegistryAnswers } from '../core/index.js';
import { KubernetesApiError, KubernetesDeadlineError, readClaim, RESOURCE_API_VERSIONS, type ClaimRead, type ClaimReference, type KubernetesClient } from '../kubernetes/index.js';
import { classifyPod, webhookEntries, type AuditedContainer, type DecidedPod, type WebhookEntry } from './classify.js';


export interface AuditSettings {
  /** One namespace; absent: all. */
  namespace?: string;
  /** Judge by this MutatingWebhookConfiguration only; absent: every one holding the chart's webhook. */
  webhookConfiguration?: string;
  /** Items per list request (`limit`). */
  chunkSize: number;
  options: Options;
  /** Registry answers for these images; absent: no lookups. */
  lookup?: (images: readonly string[]) => Promise<RegistryAnswers>;
  /** Epoch ms by which the audit ends (--timeout); absent: none. */
  deadline?: number;
}

export interface AuditResult {
  namespace?: string;
  webhookConfiguration?: string;
  webhooks: WebhookEntry[];
  /** Pods decided. */
  pods: number;
  /** Pods that have finished (Succeeded, Failed): they never start vLLM again, so they are not decided. */
  finishedPods: number;
  containers: AuditedContainer[];
}

/** The largest pod (or other object) read, in bytes of JSON: etcd stores objects of at most 1.5 MiB by default, and the API server takes requests of 3 MiB. */
export const ITEM_LIMIT = 8 << 20;

/** Bytes of pods held while they wait for registry lookups; past it, the lookups run and the pods are decided. */
export const WAITING_LIMIT = 16 << 20;

/** The audit's deadline passed between requests (the client says so for a request under way). */
export class AuditTimedOut extends PreflightError {
  constructor(readonly progress: string, message: string) {
    super('KUBERNETES_API', message);
  }
}

/** What the audit needs to be allowed, by request: said when the API server refuses one. */
const NEEDS = 'the audit needs list on pods, get and list on namespaces and mutatingwebhookconfigurations, get on resourceclaims and resourceclaimtemplates (the webhook chart\'s ClusterRole <release>-audit grants exactly these; docs/webhook.md, "Audit")';

/** A request that failed, as the error the audit stops with (exit 1). */
function apiError(what: string, error: unknown): unknown {
  if (!(error instanceof KubernetesApiError)) return error;
  const fix = error.status === 401 ? 'the credentials were not accepted: log in again, or check the kubeconfig user (kubectl auth whoami)' : error.status === 403 ? NEEDS : 'check the API server and the request above';
  return new PreflightError('KUBERNETES_API', `cannot ${what}: ${error.message}`, { fix });
}

async function call<T>(what: string, request: () => Promise<T>): Promise<T> {
  try {
    return await request();
  } catch (error) {
    throw apiError(what, error);
  }
}

async function readConfigurations(client: KubernetesClient, settings: AuditSettings): Promise<Plain[]> {
  const path = '/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations';
  const only = settings.webhookConfiguration;
  if (only === undefined) return call('list MutatingWebhookConfigurations', () => client.list(path, settings.chunkSize));
  try {
    return [await client.get(`${path}/${encodeURIComponent(only)}`)];
  } catch (error) {
    if (error instanceof KubernetesApiError && error.status === 404) return [];
    throw apiError(`get MutatingWebhookConfiguration ${only}`, error);
  }
}

/**
 * How many replicas of the Deployment behind a webhook's Service are ready
 * (the chart names both alike); undefined when it cannot be read (no such
 * Deployment, RBAC): the audit then says nothing of it.
 */
async function readReadiness(client: KubernetesClient, hook: WebhookEntry): Promise<WebhookEntry['readiness']> {
  const service = /^service ([^/\s]+)\/(\S+)$/.exec(hook.target);
  if (!service) return undefined;
  const [, namespace, name] = service;
  try {
    const deployment = await client.get(`/apis/apps/v1/namespaces/${encodeURIComponent(namespace!)}/deployments/${encodeURIComponent(name!)}`);
    const spec = asObject(deployment.spec);
    const status = asObject(deployment.status);
    const desired = typeof spec?.replicas === 'number' ? spec.replicas : 1;
    const ready = typeof status?.readyReplicas === 'number' ? status.readyReplicas : 0;
    return { deployment: `${namespace}/${name}`, ready, desired };
  } catch (error) {
    if (error instanceof KubernetesApiError) return undefined;
    throw error;
  }
}

async function readNamespaces(client: KubernetesClient, settings: AuditSettings): Promise<Map<string, Record<string, string>>> {
  const labelsOf = (ns: Plain): [string, Record<string, string>] => {
    const metadata = asObject(ns.metadata) ?? {};
    const labels = asObject(metadata.labels) ?? {};
    return [String(metadata.name ?? ''), Object.fromEntries(Object.entries(labels).map(([k, v]) => [k, String(v)]))];
  };
  if (settings.namespace === undefined) {
    const all = await call('list namespaces', () => client.list('/api/v1/namespaces', settings.chunkSize));
    return new Map(all.map(labelsOf));
  }
  const name = settings.namespace;
  try {
    return new Map([labelsOf(await client.get(`/api/v1/namespaces/${encodeURIComponent(name)}`))]);
  } catch (error) {
    if (error instanceof KubernetesApiError && error.status === 404) throw new PreflightError('KUBERNETES_API', `namespace ${name} does not exist`, { fix: 'check --namespace (kubectl get namespaces)' });
    throw apiError(`get namespace ${name}`, error);
  }
}

/** Reads each claim once per run, whichever pods name it. */
class Claims {
  private readonly reads = new Map<string, Promise<ClaimRead>>();
  private readonly versions = { preferred: RESOURCE_API_VERSIONS[0]! };

  constructor(
    private readonly client: KubernetesClient,
    /** The audit's deadline (--timeout): a read cut by it stops the audit; one cut by its own request timeout leaves its claim unreadable. */
    private readonly deadline: number | undefined,
  ) {}

  async forPod(pod: Plain, namespace: string): Promise<Pick<DecidedPod, 'claimFailures'> & { claims: ReturnType<typeof emptyDeviceClaims> }> {
    const references = claimReferences(asObject(pod.spec) ?? {});
    const wanted: ClaimReference[] = [
      ...references.claims.map((name) => ({ kind: 'ResourceClaim' as const, name })),
      ...references.templates.map((name) => ({ kind: 'ResourceClaimTemplate' as const, name })),
    ];
    const claims = emptyDeviceClaims();
    const claimFailures = new Map<string, string>();
    for (const ref of wanted) {
      const key = `${namespace}/${ref.kind}/${ref.name}`;
      let read = this.reads.get(key);
      if (!read) this.reads.set(key, (read = readClaim(this.client, namespace, ref, this.versions)));
      const answer = await read;
      // The audit's own deadline is the audit's failure, not the claim's.
      if ('timedOut' in answer && answer.timedOut && this.deadline !== undefined && Date.now() >= this.deadline) throw new AuditTimedOut(`at the DRA ${ref.kind} ${namespace}/${ref.name}`, answer.error);
      if ('error' in answer) claimFailures.set(`${ref.kind} ${ref.name}`, answer.error);
      else recordDeviceClaim(claims, answer.object);
    }
    return { claims, claimFailures };
  }
}

interface Pending {
  pod: Plain;
  namespace: string;
  claims: ReturnType<typeof emptyDeviceClaims>;
  claimFailures: ReadonlyMap<string, string>;
  optedOutByAnnotation: boolean;
}

/** The same pod without the opt-out annotation: which of its containers the annotation keeps out. */
function withoutSkipAnnotation(pod: Plain): Plain {
  const metadata = asObject(pod.metadata) ?? {};
  const { [ANNOTATION_SKIP]: _removed, ...annotations } = asObject(metadata.annotations) ?? {};
  return { ...pod, metadata: { ...metadata, annotations } };
}

/** Metadata the core and the audit read: who the pod is, its labels, its controller, when it was made, and vram-preflight's annotations. */
const METADATA_READ = ['name', 'namespace', 'uid', 'labels', 'ownerReferences', 'creationTimestamp'] as const;

/**
 * A pod as listed, cut to what is read of it: its spec (the core reads the
 * containers whole: command, args, env, resources; and the DRA claims), the
 * metadata above and the annotations of vram-preflight.io (the core reads no
 * others). Status, managedFields and every other annotation (a
 * last-applied-configuration is a second copy of the pod) are dropped before
 * anything is held.
 */
export function podFields(item: Plain): Plain {
  const metadata = asObject(item.metadata) ?? {};
  const kept: Plain = {};
  for (const key of METADATA_READ) if (metadata[key] !== undefined) kept[key] = metadata[key];
  const annotations = asObject(metadata.annotations);
  if (annotations) kept.annotations = Object.fromEntries(Object.entries(annotations).filter(([key]) => key.startsWith('vram-preflight.io/')));
  // A list's items carry no kind: the core reads this one as the Pod it is.
  return { apiVersion: 'v1', kind: 'Pod', metadata: kept, spec: item.spec };
}

function decide(pending: Pending, options: Options, registry?: RegistryAnswers): DecidedPod {
  const input = { registry, claims: pending.claims };
  return {
    pod: pending.pod,
    result: patchObject(pending.pod, options, input),
    claimFailures: pending.claimFailures,
    withoutOptOut: pending.optedOutByAnnotation ? patchObject(withoutSkipAnnotation(pending.pod), options, input) : undefined,
    ...(registry ? { registry } : {}),
  };
}

const wantedBy = (decided: DecidedPod): string[] => [...decided.result.wantedImages, ...(decided.withoutOptOut?.wantedImages ?? [])];

export async function auditCluster(client: KubernetesClient, settings: AuditSettings): Promise<AuditResult> {
  const configurations = await readConfigurations(client, settings);
  const webhooks = webhookEntries(configurations, settings.webhookConfiguration);
  for (const hook of webhooks) hook.readiness = await readReadiness(client, hook);
  const namespaces = await readNamespaces(client, settings);
  const podsPath = settings.namespace === undefined ? '/api/v1/pods' : `/api/v1/namespaces/${encodeURIComponent(settings.namespace)}/pods`;
  const listing = `list pods${settings.namespace === undefined ? ' in all namespaces' : ` in namespace ${settings.namespace}`}`;

  const claims = new Claims(client, settings.deadline);
  const containers: AuditedContainer[] = [];
  const classify = (decided: DecidedPod, namespace: string): void => void containers.push(...classifyPod(decided, namespaces.get(namespace), webhooks));
  // Pods whose images only a registry can place wait for one lookup of all such images (in batches: WAITING_LIMIT); the others are decided at once.
  let waiting: { pending: Pending; decided: DecidedPod }[] = [];
  let waitingBytes = 0;
  const answers = new Map<string, ImageStartAnswer | LookupFailure>();
  const lookups = settings.options.registryLookup !== 'never' && settings.lookup !== undefined;
  const seen = new Set<string>();
  let podCount = 0;
  let finishedPods = 0;
  const progress = (): string => `${podCount + finishedPods} pods read`;
  const checkDeadline = (): void => {
    if (settings.deadline !== undefined && Date.now() >= settings.deadline) throw new AuditTimedOut(progress(), 'the deadline passed');
  };

  const flush = async (): Promise<void> => {
    const wanted = [...new Set(waiting.flatMap(({ decided }) => wantedBy(decided)))].filter((image) => !answers.has(image)).sort();
    if (wanted.length > 0) for (const [image, answer] of await settings.lookup!(wanted)) answers.set(image, answer);
    checkDeadline();
    for (const { pending } of waiting) classify(decide(pending, settings.options, answers), pending.namespace);
    waiting = [];
    waitingBytes = 0;
  };

  const pods = client.items(podsPath, settings.chunkSize);
  for (;;) {
    checkDeadline();
    const next = await call(listing, () => pages(pods, progress));
    if (next.done) break;
    const item = next.value;
    const metadata = asObject(item.metadata) ?? {};
    // A full list after an expired continue token repeats the pods of the pages before.
    if (typeof metadata.uid === 'string') {
      if (seen.has(metadata.uid)) continue;
      seen.add(metadata.uid);
    }
    const phase = asObject(item.status)?.phase;
    if (phase === 'Succeeded' || phase === 'Failed') {
      finishedPods++;
      continue;
    }
    podCount++;
    const pod = podFields(item);
    const namespace = String(metadata.namespace ?? '');
    const { claims: podClaims, claimFailures } = await claims.forPod(pod, namespace);
    const pending: Pending = { pod, namespace, claims: podClaims, claimFailures, optedOutByAnnotation: asObject(metadata.annotations)?.[ANNOTATION_SKIP] === 'true' };
    const decided = decide(pending, settings.options);
    if (lookups && wantedBy(decided).length > 0) {
      waiting.push({ pending, decided });
      waitingBytes += JSON.stringify(pod.spec ?? null).length;
      if (waitingBytes > WAITING_LIMIT) await flush();
    } else classify(decided, namespace);
  }
  if (waiting.length > 0) await flush();

  // Sorted by namespace and pod; a pod's containers keep their order (the sort is stable).
  containers.sort((a, b) => (a.namespace !== b.namespace ? (a.namespace < b.namespace ? -1 : 1) : a.pod !== b.pod ? (a.pod < b.pod ? -1 : 1) : 0));
  return { namespace: settings.namespace, webhookConfiguration: settings.webhookConfiguration, webhooks, pods: podCount, finishedPods, containers };
}

/** The next pod of the list; the audit's deadline passing under way is the audit's failure, with how far it got. */
async function pages(pods: AsyncGenerator<Plain>, progress: () => string): Promise<IteratorResult<Plain>> {
  try {
    return await pods.next();
  } catch (error) {
    if (error instanceof KubernetesDeadlineError && error.which === 'caller') throw new AuditTimedOut(progress(), error.message);
    throw error;
  }
}

/** What the audit can say of one pod: its containers as classifyPod lists them, and what could not be read for the why. */
export interface PodAudit {
  containers: AuditedContainer[];
  /** The reads that failed (RBAC), by what they were for: the why of a container that is not protected may then be incomplete. */
  unread: string[];
}

/**
 * One pod, read as the audit reads every pod (`vram-preflight verify` asks
 * it of the pod it is about to restart): its DRA claims, the core's
 * decision with these options (images only a registry can place looked up),
 * the opt-outs, and the webhook configurations and namespace for the why.
 * Those two are read if allowed; when not, the reading goes on without them
 * and says so (`unread`), as the pod itself is what decides whether it waits.
 */
export async function auditPod(client: KubernetesClient, pod: Plain, settings: Omit<AuditSettings, 'namespace' | 'chunkSize'> & { chunkSize?: number }): Promise<PodAudit> {
  const metadata = asObject(pod.metadata) ?? {};
  const namespace = String(metadata.namespace ?? '');
  const unread: string[] = [];
  const allowed = async <T>(what: string, read: () => Promise<T>, otherwise: T): Promise<T> => {
    try {
      return await read();
    } catch (error) {
      const status = error instanceof PreflightError && error.details.fix === NEEDS ? 403 : error instanceof KubernetesApiError ? error.status : undefined;
      if (status === 403) {
        unread.push(what);
        return otherwise;
      }
      throw error;
    }
  };
  const full: AuditSettings = { ...settings, namespace, chunkSize: settings.chunkSize ?? 500 };
  const webhooks = webhookEntries(await allowed('the webhook configurations (list mutatingwebhookconfigurations)', () => readConfigurations(client, full), []), settings.webhookConfiguration);
  const namespaces = await allowed(`namespace ${namespace} (get namespaces)`, () => readNamespaces(client, full), new Map<string, Record<string, string>>());
  const item = podFields(pod);
  const { claims, claimFailures } = await new Claims(client, settings.deadline).forPod(item, namespace);
  const pending: Pending = { pod: item, namespace, claims, claimFailures, optedOutByAnnotation: asObject(metadata.annotations)?.[ANNOTATION_SKIP] === 'true' };
  let decided = decide(pending, settings.options);
  const wanted = [...new Set(wantedBy(decided))].sort();
  if (wanted.length > 0 && settings.options.registryLookup !== 'never' && settings.lookup) decided = decide(pending, settings.options, await settings.lookup(wanted));
  return { containers: classifyPod(decided, namespaces.get(namespace), webhooks), unread };
}
