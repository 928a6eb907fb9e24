/**
 * The audit of one cluster: read the webhook configurations, the namespaces
 * and the pods (page by page), read the DRA claims the pods name, decide
 * every pod with the core (patchObject, as the webhook does, with the same
 * options; images only their registry can place are looked up once for all
 * pods, then the pods that wanted them are decided again), and say for each
 * container that runs vLLM on an NVIDIA GPU whether it is protected and why
 * not (./classify.ts).
 */
import { ANNOTATION_SKIP, asObject, claimReferences, emptyDeviceClaims, patchObject, recordDeviceClaim, type Options, type RegistryAnswers } from '../core/index.js';
import { PreflightError } from '../core/errors.js';
import { KubernetesApiError, readClaim, RESOURCE_API_VERSIONS, type ClaimRead, type ClaimReference, type KubernetesClient } from '../kubernetes/index.js';
import { classifyPod, webhookEntries, type AuditedContainer, type DecidedPod, type WebhookEntry } from './classify.js';
import type { Plain } from '../core/values.js';


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

  constructor(private readonly client: KubernetesClient) {}

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

function decide(pending: Pending, options: Options, registry?: RegistryAnswers): DecidedPod {
  const input = { registry, claims: pending.claims };
  return {
    pod: pending.pod,
    result: patchObject(pending.pod, options, input),
    claimFailures: pending.claimFailures,
    withoutOptOut: pending.optedOutByAnnotation ? patchObject(withoutSkipAnnotation(pending.pod), options, input) : undefined,
  };
}

const wantedBy = (decided: DecidedPod): string[] => [...decided.result.wantedImages, ...(decided.withoutOptOut?.wantedImages ?? [])];

export async function auditCluster(client: KubernetesClient, settings: AuditSettings): Promise<AuditResult> {
  const configurations = await readConfigurations(client, settings);
  const webhooks = webhookEntries(configurations, settings.webhookConfiguration);
  const namespaces = await readNamespaces(client, settings);
  const podsPath = settings.namespace === undefined ? '/api/v1/pods' : `/api/v1/namespaces/${encodeURIComponent(settings.namespace)}/pods`;
  const listing = `list pods${settings.namespace === undefined ? ' in all namespaces' : ` in namespace ${settings.namespace}`}`;

  const claims = new Claims(client);
  const containers: AuditedContainer[] = [];
  const classify = (decided: DecidedPod, namespace: string): void => void containers.push(...classifyPod(decided, namespaces.get(namespace), webhooks));
  // Pods whose images only a registry can place wait for one lookup of all such images; the others are decided page by page.
  const waiting: { pending: Pending; decided: DecidedPod }[] = [];
  const seen = new Set<string>();
  let podCount = 0;
  let finishedPods = 0;
  const pages = client.pages(podsPath, settings.chunkSize);
  for (;;) {
    const next = await call(listing, () => pages.next());
    if (next.done) break;
    for (const item of next.value) {
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
      // A list's items carry no kind: the core reads this one as the Pod it is.
      const pod: Plain = { ...item, apiVersion: 'v1', kind: 'Pod' };
      const namespace = String(metadata.namespace ?? '');
      const { claims: podClaims, claimFailures } = await claims.forPod(pod, namespace);
      const pending: Pending = { pod, namespace, claims: podClaims, claimFailures, optedOutByAnnotation: asObject(metadata.annotations)?.[ANNOTATION_SKIP] === 'true' };
      const decided = decide(pending, settings.options);
      if (wantedBy(decided).length > 0) waiting.push({ pending, decided });
      else classify(decided, namespace);
    }
  }

  const wanted = [...new Set(waiting.flatMap(({ decided }) => wantedBy(decided)))].sort();
  const answers = wanted.length > 0 && settings.options.registryLookup !== 'never' && settings.lookup ? await settings.lookup(wanted) : undefined;
  for (const { pending, decided } of waiting) classify(answers ? decide(pending, settings.options, answers) : decided, pending.namespace);

  // Sorted by namespace and pod; a pod's containers keep their order (the sort is stable).
  containers.sort((a, b) => (a.namespace !== b.namespace ? (a.namespace < b.namespace ? -1 : 1) : a.pod !== b.pod ? (a.pod < b.pod ? -1 : 1) : 0));
  return { namespace: settings.namespace, webhookConfiguration: settings.webhookConfiguration, webhooks, pods: podCount, finishedPods, containers };
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
  const item: Plain = { ...pod, apiVersion: 'v1', kind: 'Pod' };
  const { claims, claimFailures } = await new Claims(client).forPod(item, namespace);
  const pending: Pending = { pod: item, namespace, claims, claimFailures, optedOutByAnnotation: asObject(metadata.annotations)?.[ANNOTATION_SKIP] === 'true' };
  let decided = decide(pending, settings.options);
  const wanted = [...new Set(wantedBy(decided))].sort();
  if (wanted.length > 0 && settings.options.registryLookup !== 'never' && settings.lookup) decided = decide(pending, settings.options, await settings.lookup(wanted));
  return { containers: classifyPod(decided, namespaces.get(namespace), webhooks), unread };
}
