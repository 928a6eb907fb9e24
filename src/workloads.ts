/**
 * Where each workload kind keeps its pod template(s). Adding a kind is one row.
 *
 * `group` is the API group of apiVersion ('' for the core group), so a custom
 * resource that happens to share a kind name is not mistaken for ours. A path
 * points at a pod template (an object with `metadata` and `spec`); the empty
 * path means the object itself is one (a Pod).
 */

export type TemplatePath = readonly string[];

export interface WorkloadKind {
  kind: string;
  group: string;
  templates: readonly TemplatePath[];
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
  {
    kind: 'LeaderWorkerSet',
    group: 'leaderworkerset.x-k8s.io',
    templates: [
      ['spec', 'leaderWorkerTemplate', 'leaderTemplate'],
      ['spec', 'leaderWorkerTemplate', 'workerTemplate'],
    ],
  },
];

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
