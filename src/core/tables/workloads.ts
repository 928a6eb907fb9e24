/**
 * Where each kind keeps its pod templates. Adding a kind is one row.
 *
 * `group` is the API group of apiVersion ('' for the core group), so a custom
 * resource that happens to share a kind name is not mistaken for ours. A path
 * step `*` means every item of a list (or every value of a mapping). A
 * `template` path points at a pod template (an object with `metadata` and
 * `spec`); the empty path means the object itself is one (a Pod). A `podSpec`
 * path points straight at an object holding `containers` (KServe's predictor).
 */

export type PathStep = string;
export type TemplatePath = readonly PathStep[];
const EACH = '*';

export interface WorkloadKind {
  kind: string;
  group: string;
  templates?: readonly TemplatePath[];
  podSpecs?: readonly TemplatePath[];
  /** A pod spec holding this key is built by an operator instead (KServe's `model:` predictor). */
  builtByOperatorWhen?: { key: string; why: string };
  /** KubeRay decides the start of each pod's Ray container (src/core/decide/kuberay.ts). */
  startedBy?: 'kuberay';
  /**
   * Its pod templates run one model across nodes (a leader and its workers):
   * a GPU container left unwrapped beside a wrapped one is worth a warning.
   */
  multiNode?: boolean;
}

export const WORKLOAD_KINDS: readonly WorkloadKind[] = [
  { kind: 'Pod', group: '', templates: [[]] },
  { kind: 'PodTemplate', group: '', templates: [['template']] },
  { kind: 'ReplicationController', group: '', templates: [['spec', 'template']] },
  { kind: 'Deployment', group: 'apps', templates: [['spec', 'template']] },
  { kind: 'StatefulSet', group: 'apps', templates: [['spec', 'template']] },
  { kind: 'DaemonSet', group: 'apps', templates: [['spec', 'template']] },
  { kind: 'ReplicaSet', group: 'apps', templates: [['spec', 'template']] },
  { kind: 'Job', group: 'batch', templates: [['spec', 'template']] },
  { kind: 'CronJob', group: 'batch', templates: [['spec', 'jobTemplate', 'spec', 'template']] },
  { kind: 'Rollout', group: 'argoproj.io', templates: [['spec', 'template']] },
  { kind: 'LeaderWorkerSet', group: 'leaderworkerset.x-k8s.io', templates: [['spec', 'leaderWorkerTemplate', 'leaderTemplate'], ['spec', 'leaderWorkerTemplate', 'workerTemplate']], multiNode: true },
  // llm-d's DisaggregatedSet: a LeaderWorkerSet template per role (v1 under `spec`, v1alpha1 on the role itself).
  { kind: 'DisaggregatedSet', group: 'disaggregatedset.x-k8s.io', templates: [['spec', 'roles', EACH, 'spec', 'leaderWorkerTemplate', 'leaderTemplate'], ['spec', 'roles', EACH, 'spec', 'leaderWorkerTemplate', 'workerTemplate'], ['spec', 'roles', EACH, 'leaderWorkerTemplate', 'leaderTemplate'], ['spec', 'roles', EACH, 'leaderWorkerTemplate', 'workerTemplate']], multiNode: true },
  { kind: 'JobSet', group: 'jobset.x-k8s.io', templates: [['spec', 'replicatedJobs', EACH, 'template', 'spec', 'template']] },
  // KubeRay copies these pod templates into the head and worker pods, but decides the Ray container's start itself.
  { kind: 'RayCluster', group: 'ray.io', templates: [['spec', 'headGroupSpec', 'template'], ['spec', 'workerGroupSpecs', EACH, 'template']], startedBy: 'kuberay' },
  { kind: 'RayService', group: 'ray.io', templates: [['spec', 'rayClusterConfig', 'headGroupSpec', 'template'], ['spec', 'rayClusterConfig', 'workerGroupSpecs', EACH, 'template']], startedBy: 'kuberay' },
  { kind: 'RayJob', group: 'ray.io', templates: [['spec', 'rayClusterSpec', 'headGroupSpec', 'template'], ['spec', 'rayClusterSpec', 'workerGroupSpecs', EACH, 'template']], startedBy: 'kuberay' },
  // aibrix: a RayClusterFleet holds a RayCluster template (spec.template.spec is a RayClusterSpec:
  // api/orchestration/v1alpha1/rayclusterfleet_types.go); aibrix creates the RayClusters, KubeRay their pods.
  { kind: 'RayClusterFleet', group: 'orchestration.aibrix.ai', templates: [['spec', 'template', 'spec', 'headGroupSpec', 'template'], ['spec', 'template', 'spec', 'workerGroupSpecs', EACH, 'template']], startedBy: 'kuberay' },
  // aibrix: every role of a StormService carries a plain pod template (aibrix samples/disaggregation).
  { kind: 'StormService', group: 'orchestration.aibrix.ai', templates: [['spec', 'template', 'spec', 'roles', EACH, 'template']] },
  // KServe custom containers: the predictor/transformer/explainer hold a pod spec inline.
  { kind: 'InferenceService', group: 'serving.kserve.io', podSpecs: [['spec', 'predictor'], ['spec', 'transformer'], ['spec', 'explainer']], builtByOperatorWhen: { key: 'model', why: 'KServe builds the model server container from a ServingRuntime at reconcile time' } },
  { kind: 'Service', group: 'serving.knative.dev', templates: [['spec', 'template']] },
];

/**
 * Kinds whose pods an operator builds at run time from more than the manifest
 * says (a runtime's start, a config resource, its own flags): a wrap written
 * into the manifest would not be the start the operator runs, so these are
 * named by `explain` and left alone.
 */
export interface OperatorKind {
  kind: string;
  group: string;
  why: string;
}

export const OPERATOR_KINDS: readonly OperatorKind[] = [
  { kind: 'ServingRuntime', group: 'serving.kserve.io', why: 'KServe merges this runtime with each InferenceService (its args are templates, model args are appended)' },
  { kind: 'ClusterServingRuntime', group: 'serving.kserve.io', why: 'KServe merges this runtime with each InferenceService (its args are templates, model args are appended)' },
  { kind: 'LLMInferenceService', group: 'serving.kserve.io', why: 'KServe builds the pod from LLMInferenceServiceConfig presets at reconcile time' },
  { kind: 'LLMInferenceServiceConfig', group: 'serving.kserve.io', why: 'a preset KServe merges into LLMInferenceService pods at reconcile time' },
  { kind: 'Model', group: 'kubeai.org', why: 'KubeAI builds the vLLM pod and its command from the Model at run time' },
  { kind: 'DynamoGraphDeployment', group: 'nvidia.com', why: 'the Dynamo operator builds worker pods and their start from the graph at run time' },
  { kind: 'DynamoComponentDeployment', group: 'nvidia.com', why: 'the Dynamo operator builds the pod and its start at run time' },
  { kind: 'VLLMRuntime', group: 'production-stack.vllm.ai', why: 'the production-stack operator builds the vLLM pod and its command at run time' },
  { kind: 'ModelService', group: 'llm-d.ai', why: 'the llm-d operator builds prefill/decode pods from presets at run time' },
  { kind: 'BackendRuntime', group: 'inference.llmaz.io', why: 'llmaz builds each model\'s pod from this runtime and the Playground at run time (its args are Go templates)' },
];

/**
 * OpenShift templates hold whole objects in `objects`, created later by `oc
 * process` with their `${PARAMETERS}` filled in: what they hold is named, not
 * wrapped.
 */
export const TEMPLATE_KIND = { kind: 'Template', group: 'template.openshift.io', objects: 'objects', why: 'an OpenShift Template: `oc process` fills in its parameters and creates the object later; process it first (oc process … | vram-preflight) to have the result decided' } as const;

/** Kinds explain names although they carry no `containers` key of their own: the text test must let them through. */
export const KINDS_WITHOUT_CONTAINERS: readonly string[] = [...OPERATOR_KINDS.map((k) => k.kind), TEMPLATE_KIND.kind, ...WORKLOAD_KINDS.filter((k) => k.builtByOperatorWhen || k.startedBy).map((k) => k.kind)];

/** `kind: List` (what `kubectl get -o yaml` prints) holds whole objects in `items`. */
export const LIST_KIND = 'List';

export function apiGroup(apiVersion: unknown): string {
  if (typeof apiVersion !== 'string') return '';
  const slash = apiVersion.indexOf('/');
  return slash === -1 ? '' : apiVersion.slice(0, slash);
}

export function findWorkloadKind(kind: unknown, apiVersion: unknown): WorkloadKind | undefined {
  const group = apiGroup(apiVersion);
  return WORKLOAD_KINDS.find((row) => row.kind === kind && row.group === group);
}

export function findOperatorKind(kind: unknown, apiVersion: unknown): OperatorKind | undefined {
  const group = apiGroup(apiVersion);
  return OPERATOR_KINDS.find((row) => row.kind === kind && row.group === group);
}

/** One concrete pod template (or inline pod spec) found in an object. */
export interface FoundTemplate {
  /** Concrete path: `EACH` replaced by list indices or mapping keys. */
  path: readonly (string | number)[];
  /** true: the path points at {metadata, spec}; false: at an object holding `containers`. */
  isTemplate: boolean;
}

type Plain = Record<string | number, unknown>;

function expand(value: unknown, steps: TemplatePath, at: (string | number)[], out: (string | number)[][]): void {
  if (steps.length === 0) {
    if (value && typeof value === 'object') out.push(at);
    return;
  }
  if (!value || typeof value !== 'object') return;
  const [step, ...rest] = steps as [string, ...string[]];
  if (step === EACH) {
    if (Array.isArray(value)) value.forEach((item, i) => expand(item, rest, [...at, i], out));
    else for (const key of Object.keys(value)) expand((value as Plain)[key], rest, [...at, key], out);
    return;
  }
  if (Array.isArray(value)) return;
  expand((value as Plain)[step], rest, [...at, step], out);
}

/** The pod templates of an object of this kind, as concrete paths into its value. */
export function templatesOf(row: WorkloadKind, value: unknown): FoundTemplate[] {
  const found: FoundTemplate[] = [];
  for (const [paths, isTemplate] of [[row.templates ?? [], true], [row.podSpecs ?? [], false]] as const) {
    for (const path of paths) {
      const out: (string | number)[][] = [];
      expand(value, path, [], out);
      for (const p of out) found.push({ path: p, isTemplate });
    }
  }
  return found;
}
