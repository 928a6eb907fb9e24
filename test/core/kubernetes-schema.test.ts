/**
 * Every rewritten fixture must still be a valid Kubernetes object: validated
 * with kubernetes-models (the OpenAPI schemas of Kubernetes, as JSON Schema),
 * and no container may carry a null or empty command/args.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { DaemonSet, Deployment, ReplicaSet, StatefulSet } from 'kubernetes-models/apps/v1';
import { Job } from 'kubernetes-models/batch/v1';
import { CronJob as BatchCronJob } from 'kubernetes-models/batch/v1';
import { Pod, PodTemplateSpec } from 'kubernetes-models/v1';

type Model = new (data: never) => { validate(): void };
const MODELS: Record<string, Model> = {
  'v1/Pod': Pod as unknown as Model,
  'apps/v1/Deployment': Deployment as unknown as Model,
  'apps/v1/StatefulSet': StatefulSet as unknown as Model,
  'apps/v1/DaemonSet': DaemonSet as unknown as Model,
  'apps/v1/ReplicaSet': ReplicaSet as unknown as Model,
  'batch/v1/Job': Job as unknown as Model,
  'batch/v1/CronJob': BatchCronJob as unknown as Model,
};
/** Custom resources: only their pod templates have a Kubernetes schema. */
const CRD_TEMPLATES: Record<string, string[][]> = {
  'argoproj.io/v1alpha1/Rollout': [['spec', 'template']],
  'leaderworkerset.x-k8s.io/v1/LeaderWorkerSet': [
    ['spec', 'leaderWorkerTemplate', 'leaderTemplate'],
    ['spec', 'leaderWorkerTemplate', 'workerTemplate'],
  ],
  'orchestration.aibrix.ai/v1alpha1/StormService': [['spec', 'template', 'spec', 'roles', '0', 'template']],
  'disaggregatedset.x-k8s.io/v1/DisaggregatedSet': [['spec', 'roles', '0', 'spec', 'leaderWorkerTemplate', 'workerTemplate']],
  'ray.io/v1/RayCluster': [['spec', 'headGroupSpec', 'template'], ...['0', '1', '2', '3'].map((i) => ['spec', 'workerGroupSpecs', i, 'template'])],
  'ray.io/v1/RayService': [['spec', 'rayClusterConfig', 'headGroupSpec', 'template'], ['spec', 'rayClusterConfig', 'workerGroupSpecs', '0', 'template']],
};

const root = join(import.meta.dirname, '../../fixtures');
const outputs = [
  ...readdirSync(join(root, 'cases'))
    .map((name) => join(root, 'cases', name, 'expected.yaml'))
    .filter((path) => existsSync(path)),
  join(root, 'real', 'vllm.expected.yaml'),
];

function containersOf(object: Record<string, any>): Record<string, unknown>[] {
  const found: Record<string, unknown>[] = [];
  const walk = (value: unknown): void => {
    if (Array.isArray(value)) value.forEach(walk);
    else if (value && typeof value === 'object') {
      for (const [key, child] of Object.entries(value)) {
        if ((key === 'containers' || key === 'initContainers') && Array.isArray(child)) found.push(...child);
        walk(child);
      }
    }
  };
  walk(object);
  return found;
}

function validateObject(object: Record<string, any>): number {
  if (object.kind === 'List') return (object.items as Record<string, any>[]).reduce((n, item) => n + validateObject(item), 0);
  const key = `${object.apiVersion}/${object.kind}`;
  const model = MODELS[key];
  if (model) {
    new model(object as never).validate();
    return 1;
  }
  let count = 0;
  for (const path of CRD_TEMPLATES[key] ?? []) {
    const template = path.reduce<any>((node, part) => node?.[part], object);
    new PodTemplateSpec(template).validate();
    count += 1;
  }
  return count;
}

describe('rewritten fixtures validate against the Kubernetes schema', () => {
  it('covers the rewritten fixtures', () => {
    expect(outputs.length).toBeGreaterThanOrEqual(25);
  });
  for (const path of outputs) {
    it(path.slice(root.length + 1), () => {
      // A repeated key is accepted as Helm and the API server accept it (fixture duplicate-label-key): the last one wins.
      const docs = parseAllDocuments(readFileSync(path, 'utf8'), { version: '1.1', uniqueKeys: false });
      let validated = 0;
      for (const doc of Array.isArray(docs) ? docs : []) {
        expect(doc.errors).toEqual([]);
        const object = doc.toJS() as Record<string, any> | null;
        if (!object || typeof object !== 'object') continue;
        validated += validateObject(object);
        for (const container of containersOf(object)) {
          for (const field of ['command', 'args']) {
            if (field in container) {
              expect(Array.isArray(container[field]), `${field} of ${String(container.name)} is a list`).toBe(true);
              expect((container[field] as unknown[]).length, `${field} of ${String(container.name)} is not empty`).toBeGreaterThan(0);
            }
          }
        }
      }
      expect(validated).toBeGreaterThan(0);
    });
  }
});
