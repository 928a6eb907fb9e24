/**
 * One model across nodes (a LeaderWorkerSet's leader and workers): a wait in
 * front of some of its GPU containers and not others protects only part of
 * the model's GPUs.
 */
import { ACTION_EFFECTS, type ContainerReport } from './container.js';

/**
 * GPU containers of the object that were skipped while a container of
 * another of its templates is wrapped (a deliberate opt-out is not reported).
 */
export function unwrappedGpuWorkers(reports: readonly ContainerReport[]): { skipped: ContainerReport; wrapped: ContainerReport }[] {
  const pairs: { skipped: ContainerReport; wrapped: ContainerReport }[] = [];
  for (const skipped of reports) {
    if (skipped.initContainer || skipped.action !== 'skip' || skipped.gpuSignals.length === 0 || skipped.reason.startsWith('opted out')) continue;
    const wrapped = reports.find((r) => ACTION_EFFECTS[r.action].waits && r.template !== skipped.template);
    if (wrapped) pairs.push({ skipped, wrapped });
  }
  return pairs;
}
