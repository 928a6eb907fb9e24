/**
 * What the audit says about each container the core decided in a running pod.
 * The decision itself is the core's (patchObject, as the webhook calls it,
 * with already wrapped containers kept): `unchanged` is a container whose
 * start runs the wait; `wrap` (or an error) is one the webhook would wrap
 * (or refuse) if it admitted the pod now, so it runs vLLM on an NVIDIA GPU
 * without the wait. This module only says why that is so, from what the
 * cluster holds: the pod's vram-preflight.io annotations (the webhook was
 * called), the webhook configurations (installed? selecting this pod? since
 * when?), and the opt-outs. It reads no network and no clock.
 */
import { type Action, ACTION_EFFECTS, ANNOTATION_NOT_WRAPPED, ANNOTATION_SKIP, ANNOTATION_WRAPPED, asObject, type ContainerReport, imageEntryFix, imageEntryYaml, type PatchResult, type Plain, type RegistryAnswers } from '../core/index.js';
import { describeRequirement, labelChange, labelsOf, rulesCoverPodCreate, unmet, type Requirement } from './selection.js';


/** The label the chart's objectSelector keeps out (the API server never sends such a pod): the annotation's key. */
export const LABEL_SKIP = ANNOTATION_SKIP;
/** The name the chart gives its webhook inside the MutatingWebhookConfiguration. */
export const WEBHOOK_NAME = 'pods.vram-preflight.io';

export type Status = 'protected' | 'unprotected' | 'undetermined' | 'opted-out';

/** Why a container is in its status (docs/webhook.md, "Audit", lists each with its fix). */
export type WhyCode =
  | 'wrapped'
  | 'not-wrapped'
  | 'decided-otherwise-at-admission'
  | 'start-replaced'
  | 'cannot-be-wrapped'
  | 'no-webhook'
  | 'rules-exclude-pods'
  | 'namespace-not-selected'
  | 'pod-not-selected'
  | 'created-before-webhook'
  | 'webhook-not-called'
  | 'claim-unreadable'
  | 'opted-out-label'
  | 'opted-out-annotation';

export interface AuditedContainer {
  namespace: string;
  pod: string;
  container: string;
  image?: string;
  /** The pod's controller (ownerReference with controller: true). */
  owner?: { kind: string; name: string };
  createdAt?: string;
  status: Status;
  why: { code: WhyCode; detail: string };
  fix?: string;
  /** What the webhook would do with this container if it admitted the pod now (the core's decision, with this audit's config). */
  decision: { action: Action; reason: string; fix?: string };
}

/** One webhook of a MutatingWebhookConfiguration that is vram-preflight's. */
export interface WebhookEntry {
  configuration: string;
  createdAt?: string;
  webhook: string;
  namespaceSelector?: unknown;
  objectSelector?: unknown;
  rules?: unknown;
  /** CEL matchConditions, which the audit does not evaluate. */
  matchConditions: number;
  failurePolicy?: string;
  /** Where the API server calls it: `service NAMESPACE/NAME` or its URL. */
  target: string;
  /** The replicas of the Deployment behind the Service (the chart names both alike), when the audit could read it. */
  readiness?: { deployment: string; ready: number; desired: number };
}

export interface DecidedPod {
  /** The pod as the API server holds it (kind set). */
  pod: Plain;
  result: PatchResult;
  /** DRA claims of the pod that could not be read, by `Kind name`. */
  claimFailures: ReadonlyMap<string, string>;
  /** Opted out by annotation: the decision for the same pod without it (which containers it keeps out). */
  withoutOptOut?: PatchResult;
  /** The registry answers it was decided with. */
  registry?: RegistryAnswers;
}

/** The webhook configurations as seen by the audit: those it judges by, by name. */
export function webhookEntries(configurations: readonly Plain[], only?: string): WebhookEntry[] {
  const entries: WebhookEntry[] = [];
  for (const config of configurations) {
    const metadata = asObject(config.metadata);
    const name = String(metadata?.name ?? '');
    if (only !== undefined && name !== only) continue;
    for (const item of Array.isArray(config.webhooks) ? config.webhooks : []) {
      const hook = asObject(item);
      if (!hook) continue;
      // The chart's webhook by its name; a configuration named explicitly counts whole.
      if (only === undefined && hook.name !== WEBHOOK_NAME) continue;
      const client = asObject(hook.clientConfig);
      const service = asObject(client?.service);
      entries.push({
        configuration: name,
        createdAt: typeof metadata?.creationTimestamp === 'string' ? metadata.creationTimestamp : undefined,
        webhook: String(hook.name ?? ''),
        namespaceSelector: hook.namespaceSelector,
        objectSelector: hook.objectSelector,
        rules: hook.rules,
        matchConditions: Array.isArray(hook.matchConditions) ? hook.matchConditions.length : 0,
        failurePolicy: typeof hook.failurePolicy === 'string' ? hook.failurePolicy : undefined,
        target: service ? `service ${String(service.namespace)}/${String(service.name)}` : String(client?.url ?? '(no clientConfig)'),
      });
    }
  }
  const order = (x: string, y: string): number => (x < y ? -1 : x > y ? 1 : 0);
  return entries.sort((a, b) => order(a.configuration, b.configuration) || order(a.webhook, b.webhook));
}

interface PodFacts {
  namespace: string;
  name: string;
  labels: Record<string, string>;
  annotations: Plain;
  createdAt?: string;
  owner?: { kind: string; name: string };
}

function factsOf(pod: Plain): PodFacts {
  const metadata = asObject(pod.metadata) ?? {};
  const owners = Array.isArray(metadata.ownerReferences) ? metadata.ownerReferences.map(asObject) : [];
  const controller = owners.find((o) => o?.controller === true) ?? owners[0];
  return {
    namespace: String(metadata.namespace ?? ''),
    name: String(metadata.name ?? ''),
    labels: labelsOf(pod),
    annotations: asObject(metadata.annotations) ?? {},
    createdAt: typeof metadata.creationTimestamp === 'string' ? metadata.creationTimestamp : undefined,
    owner: controller && typeof controller.kind === 'string' && typeof controller.name === 'string' ? { kind: controller.kind, name: controller.name } : undefined,
  };
}

/** How to get a pod created again, so that the webhook sees it. */
function recreate(pod: PodFacts): string {
  const del = `kubectl -n ${pod.namespace} delete pod ${pod.name}`;
  if (pod.owner) return `delete the pod (${del}): its ${pod.owner.kind} ${pod.owner.name} creates a new one, which the webhook wraps`;
  return `create the pod again (${del}, then apply its manifest) so that the webhook wraps it`;
}

/**
 * The webhook's reason for one container, from its not-wrapped annotation
 * (src/webhook/admission.ts, notWrappedAnnotation). Since 0.4.0 one block per
 * container: a line `name: reason`, then indented lines of the fix (a
 * `config.images` entry), and a last line `... and N more container(s)` when
 * the annotation was full. 0.3.0 wrote `name: reason; name: reason` on one
 * line, cut here at the names of the pod's containers (a reason may hold
 * "; " itself). `*`: the whole pod (an internal error).
 */
export function notWrappedReason(annotation: unknown, container: string, names: readonly string[]): string | undefined {
  if (typeof annotation !== 'string' || annotation === '') return undefined;
  const candidates = [...names, '*'].sort((a, b) => b.length - a.length);
  const lines = annotation.split('\n');
  if (lines.length > 1) {
    for (const line of lines) {
      if (line.startsWith(' ')) continue;
      const name = candidates.find((n) => line.startsWith(`${n}: `));
      if (name === container || name === '*') return line.slice(name.length + 2);
    }
    // The webhook had more to say than the annotation holds: this container's reason is in its log.
    if (lines.some((line) => line.startsWith('... and '))) return "its reason did not fit in the annotation (the webhook's log has it)";
    return undefined;
  }
  const starts = candidates
    .flatMap((name) => {
      const found: { name: string; at: number }[] = [];
      for (let at = annotation.indexOf(`${name}: `); at !== -1; at = annotation.indexOf(`${name}: `, at + 1)) {
        if (at === 0 || annotation.startsWith('; ', at - 2)) found.push({ name, at });
      }
      return found;
    })
    .sort((a, b) => a.at - b.at);
  const index = starts.findIndex((s) => s.name === container || s.name === '*');
  if (index === -1) return undefined;
  const start = starts[index]!;
  const end = starts[index + 1]?.at;
  return annotation.slice(start.at + start.name.length + 2, end === undefined ? undefined : end - 2);
}

function listed(annotation: unknown, container: string): boolean {
  return typeof annotation === 'string' && annotation.split(',').map((s) => s.trim()).includes(container);
}

/** Why no vram-preflight webhook wraps this pod, from the configurations alone. */
function selectionWhy(pod: PodFacts, namespaceLabels: Readonly<Record<string, string>> | undefined, webhooks: readonly WebhookEntry[]): { code: WhyCode; detail: string; fix: string } {
  if (webhooks.length === 0) {
    return {
      code: 'no-webhook',
      detail: 'no vram-preflight admission webhook is installed (no MutatingWebhookConfiguration with the webhook pods.vram-preflight.io)',
      fix: `install it (helm install vram-preflight deploy/webhook, docs/webhook.md), then ${recreate(pod)}; or render the workload through the post-renderer (helm --post-renderer vram-preflight)`,
    };
  }
  const selecting: WebhookEntry[] = [];
  let first: { code: WhyCode; detail: string; fix: string } | undefined;
  for (const hook of webhooks) {
    const name = `${hook.configuration} (webhook ${hook.webhook})`;
    if (!rulesCoverPodCreate(hook.rules)) {
      first ??= { code: 'rules-exclude-pods', detail: `the rules of ${name} do not cover Pod CREATE`, fix: `restore the rules the chart sets (pods, CREATE, core group v1), then ${recreate(pod)}` };
      continue;
    }
    const labels = namespaceLabels ?? { 'kubernetes.io/metadata.name': pod.namespace };
    const nsUnmet = unmet(hook.namespaceSelector, labels);
    if (nsUnmet) {
      first ??= { code: 'namespace-not-selected', detail: `namespace ${pod.namespace} is not selected by ${name}: its namespaceSelector wants ${describeRequirement(nsUnmet)}`, fix: namespaceFix(pod, nsUnmet, labels) };
      continue;
    }
    const podUnmet = unmet(hook.objectSelector, pod.labels);
    if (podUnmet) {
      const change = labelChange(podUnmet, pod.labels);
      first ??= {
        code: 'pod-not-selected',
        detail: `the pod's labels are not selected by ${name}: its objectSelector wants ${describeRequirement(podUnmet)}`,
        fix: `${change ? `change the label on the pod template (${change}), then ` : ''}${recreate(pod)}`,
      };
      continue;
    }
    selecting.push(hook);
  }
  if (selecting.length === 0) return first!;
  const since = selecting.map((h) => h.createdAt).filter((t): t is string => t !== undefined).sort()[0];
  if (pod.createdAt !== undefined && since !== undefined && Date.parse(pod.createdAt) < Date.parse(since)) {
    return {
      code: 'created-before-webhook',
      detail: `the pod was created (${pod.createdAt}) before the webhook configuration ${selecting[0]!.configuration} (${since}): no webhook saw it`,
      fix: recreate(pod),
    };
  }
  const hook = selecting[0]!;
  const conditions = hook.matchConditions > 0 ? `, or its ${hook.matchConditions} matchConditions (CEL, not evaluated here) left it out` : '';
  const r = hook.readiness;
  const now = r ? `; now its Deployment ${r.deployment} has ${r.ready} of ${r.desired} replicas ready` : '';
  const check = r && r.ready < Math.max(1, r.desired)
    ? `bring the webhook up (kubectl -n ${r.deployment.split('/')[0]} describe deployment ${r.deployment.split('/')[1]}: ${r.ready} of ${r.desired} replicas ready; its pods' events and logs say why)`
    : "check that the webhook is up and reachable (its pods and endpoints; the API server's apiserver_admission_webhook_fail_open_count counts pods admitted without it)";
  return {
    code: 'webhook-not-called',
    detail: `${hook.configuration} selects this pod, yet it was not wrapped and carries no vram-preflight.io annotation: the webhook (${hook.target}) was not called or did not answer when the pod was created, so failurePolicy ${hook.failurePolicy ?? 'Fail'} admitted it unchanged (the webhook down, not ready, unreachable or slower than its timeout), or the namespace was labelled after the pod was created${conditions}${now}`,
    fix: `${check}, then ${recreate(pod)}`,
  };
}

function namespaceFix(pod: PodFacts, r: Requirement, labels: Readonly<Record<string, string>>): string {
  if (r.key === 'kubernetes.io/metadata.name') {
    return `namespace ${pod.namespace} is excluded by name (the chart's webhook.excludeNamespaces, kube-system, kube-node-lease or the webhook's own namespace): run the model in another namespace, or take ${pod.namespace} out of webhook.excludeNamespaces and ${recreate(pod)}`;
  }
  const change = labelChange(r, labels);
  return `${change ? `kubectl label namespace ${pod.namespace} ${change}, then ` : ''}${recreate(pod)}`;
}

/**
 * The fix of a container the webhook refused, in the webhook's terms: for a
 * start only a config entry or a registry can place, the entry to add to the
 * chart's `config.images` (as the webhook's own annotation gives it), not the
 * CLI's --config file; else the core's fix.
 */
function webhookFix(decided: DecidedPod, report: ContainerReport, then: string): string {
  if (report.error?.code !== 'UNKNOWN_START' || report.image === undefined) return `${report.error?.details.fix ?? 'see docs/errors.md'}; then ${then}`;
  const container = (Array.isArray(asObject(decided.pod.spec)?.containers) ? (asObject(decided.pod.spec)!.containers as unknown[]) : []).map(asObject).find((c) => c?.name === report.container);
  const answer = decided.registry?.get(report.image.trim());
  const failed = answer !== undefined && 'error' in answer;
  const entry = imageEntryFix(report.image, Array.isArray(container?.args) && container.args.length > 0, failed, failed && answer.notAllowed === true);
  const how = entry.like !== undefined ? `a mirror of ${entry.like}` : (entry.howToRead ?? '');
  return [`add this entry to config.images in the webhook chart's values (${how}) and helm upgrade, then ${then}:`, '  config:', '    images:', ...imageEntryYaml(entry, '      ')].join('\n');
}

/** A container the audit is about: one the core would change or could not (vLLM on an NVIDIA GPU), as the core's own table says. */
const isTarget = (action: Action): boolean => ACTION_EFFECTS[action].writes || ACTION_EFFECTS[action].missed;

function byContainer(result: PatchResult | undefined): Map<string, ContainerReport> {
  return new Map((result?.containers ?? []).filter((r) => !r.initContainer).map((r) => [r.container, r]));
}

/** Every container of one pod that the audit lists: protected, not protected, undetermined or opted out. Containers that are no target are left out. */
export function classifyPod(decided: DecidedPod, namespaceLabels: Readonly<Record<string, string>> | undefined, webhooks: readonly WebhookEntry[]): AuditedContainer[] {
  const pod = factsOf(decided.pod);
  const names = decided.result.containers.filter((r) => !r.initContainer).map((r) => r.container);
  const unopted = byContainer(decided.withoutOptOut);
  const out: AuditedContainer[] = [];
  let selection: ReturnType<typeof selectionWhy> | undefined;
  const calledBefore = pod.annotations[ANNOTATION_WRAPPED] !== undefined || pod.annotations[ANNOTATION_NOT_WRAPPED] !== undefined;
  for (const report of decided.result.containers) {
    if (report.initContainer) continue;
    const base = { namespace: pod.namespace, pod: pod.name, container: report.container, image: report.image, owner: pod.owner, createdAt: pod.createdAt };
    const decision = { action: report.action, reason: report.reason, ...(report.error?.details.fix !== undefined && { fix: report.error.details.fix }) };
    if (report.action === 'unchanged') {
      const by = listed(pod.annotations[ANNOTATION_WRAPPED], report.container) ? 'the webhook, at admission' : 'the post-renderer at render time, or a webhook that left no annotation';
      out.push({ ...base, status: 'protected', why: { code: 'wrapped', detail: `its start runs the vram-preflight wait (wrapped by ${by})` }, decision });
      continue;
    }
    const optedByLabel = pod.labels[LABEL_SKIP] === 'true';
    const optedByAnnotation = pod.annotations[ANNOTATION_SKIP] === 'true';
    // Opted out by annotation, the core skipped it: the decision without the annotation says whether it would be a target.
    const wouldBe = optedByAnnotation ? (unopted.get(report.container) ?? report) : report;
    const target = isTarget(wouldBe.action);
    if (target && (optedByLabel || optedByAnnotation)) {
      const how = optedByLabel ? `label ${LABEL_SKIP}=true (the webhook's objectSelector keeps the pod out)` : `annotation ${ANNOTATION_SKIP}: "true"`;
      out.push({ ...base, status: 'opted-out', why: { code: optedByLabel ? 'opted-out-label' : 'opted-out-annotation', detail: `runs vLLM on an NVIDIA GPU, opted out by ${how}` }, decision: { action: wouldBe.action, reason: wouldBe.reason } });
      continue;
    }
    if (!target) {
      // DRA: vLLM whose GPU is a claim that could not be read: neither protected nor known not to need it.
      if (decided.claimFailures.size > 0 && report.unknownDeviceClaims) {
        const named = [...decided.claimFailures].filter(([label]) => report.unknownDeviceClaims!.some((claim) => claim.startsWith(`${label} `)));
        const claims = (named.length > 0 ? named : [...decided.claimFailures]).map(([label, why]) => `DRA ${label}: ${why}`).join('; ');
        out.push({
          ...base,
          status: 'undetermined',
          why: { code: 'claim-unreadable', detail: `${claims}, so whether this vLLM container has an NVIDIA GPU cannot be told` },
          fix: 'let the audit read the claims: get on resourceclaims and resourceclaimtemplates of resource.k8s.io (the chart\'s audit ClusterRole grants it)',
          decision,
        });
      }
      continue;
    }
    const said = notWrappedReason(pod.annotations[ANNOTATION_NOT_WRAPPED], report.container, names);
    let why: { code: WhyCode; detail: string; fix: string };
    if (report.action === 'cannot-wrap') {
      // No webhook and no recreation changes this one (a MIG instance): said, and how to take it off the list on purpose.
      why = {
        code: 'cannot-be-wrapped',
        detail: `vram-preflight cannot wrap it: ${report.reason}`,
        fix: `none that vram-preflight can apply: its in-place restarts are as without it; to acknowledge that and take it off this list, label the pod template ${LABEL_SKIP}=true`,
      };
    } else if (said !== undefined) {
      const now = report.action === 'error'
        ? webhookFix(decided, report, recreate(pod))
        : `the webhook would wrap it now (with the config given to this audit: what it lacked at admission, a config entry or a registry answer, is there now): ${recreate(pod)}`;
      why = { code: 'not-wrapped', detail: `the webhook refused to wrap it at admission: ${said}`, fix: now };
    } else if (listed(pod.annotations[ANNOTATION_WRAPPED], report.container)) {
      why = {
        code: 'start-replaced',
        detail: `annotation ${ANNOTATION_WRAPPED} says the webhook wrapped it, but its start no longer runs the wait: a later admission webhook or the pod's controller replaced its command or args`,
        fix: `find what rewrites the start (kubectl get mutatingwebhookconfigurations; the controller of the pod) and let it keep the wrapped start, or set reinvocationPolicy: IfNeeded on it; then ${recreate(pod)}`,
      };
    } else if (calledBefore) {
      why = {
        code: 'decided-otherwise-at-admission',
        detail: 'the webhook admitted this pod (its vram-preflight.io annotations say so) but did not take this container for a target then: it decided with another config (containerNames, images) or version than this audit',
        fix: `give the webhook the config given to this audit (one ConfigMap for both), then ${recreate(pod)}`,
      };
    } else {
      selection ??= selectionWhy(pod, namespaceLabels, webhooks);
      why = selection;
    }
    out.push({ ...base, status: 'unprotected', why: { code: why.code, detail: why.detail }, fix: why.fix, decision });
  }
  return out;
}
