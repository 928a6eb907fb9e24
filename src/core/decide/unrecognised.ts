/**
 * What the walk finds in objects whose kind it has no row for: containers
 * that would be targets, named so that they are not passed in silence.
 */
import { nvidiaGpuSignals, type DeviceClaims, type GpuSignal } from '../tables/gpu.js';
import { imageIsVllmFamily, startsRayNode, vllmEvidence } from './detect.js';
import { asObject, type Plain } from '../values.js';


function strings(value: unknown): string[] | undefined {
  return Array.isArray(value) && value.every((item) => typeof item === 'string') ? (value as string[]) : undefined;
}

export interface UnrecognisedContainer {
  /** Path of the container in the object's value. */
  path: (string | number)[];
  name: string;
  image?: string;
  gpus: string[];
  signals: GpuSignal[];
  /** What says it runs vLLM: its written start, or only its image (no command: the image's start, or an operator's, decides). */
  evidence: 'start' | 'image';
}

/** Deep enough for any operator's nesting (llm-d's roles hold LeaderWorkerSet templates seven levels down). */
const MAX_DEPTH = 16;

/**
 * Every `containers` list anywhere in the object whose items start vLLM (by
 * their start, or a vLLM-family image with no command) with an NVIDIA GPU
 * signal, read against the mapping that holds the list as its pod spec.
 */
export function containersStartingVllm(object: Plain, claims: DeviceClaims): UnrecognisedContainer[] {
  const found: UnrecognisedContainer[] = [];
  const walk = (value: unknown, path: (string | number)[], depth: number): void => {
    if (depth > MAX_DEPTH || !value || typeof value !== 'object') return;
    if (Array.isArray(value)) {
      value.forEach((item, i) => walk(item, [...path, i], depth + 1));
      return;
    }
    const holder = value as Plain;
    for (const [key, child] of Object.entries(holder)) {
      if (key === 'containers' && Array.isArray(child)) {
        child.forEach((item, i) => {
          const container = asObject(item);
          if (!container) return;
          const command = strings(container.command);
          const written = [...(command ?? []), ...(strings(container.args) ?? [])];
          const image = typeof container.image === 'string' ? container.image : undefined;
          const evidence = vllmEvidence(written) !== undefined ? 'start' : !command?.length && !startsRayNode(written) && imageIsVllmFamily(image) ? 'image' : undefined;
          if (!evidence) return;
          const { signals } = nvidiaGpuSignals({ container, podSpec: holder, claims });
          if (signals.length === 0) return;
          found.push({ path: [...path, key, i], name: String(container.name ?? '?'), image, gpus: signals.map((s) => s.detail), signals, evidence });
        });
      } else walk(child, [...path, key], depth + 1);
    }
  };
  walk(object, [], 0);
  return found;
}

/**
 * A vLLM image named by a custom resource that has no `containers` list anywhere:
 * under a key ending in `image` (`image`, `vllmImage`, `runtimeImage`: an
 * operator's CRD chooses), as a string or as a mapping's `repository`. Such an
 * object (geeper-io/llm-operator's LMDeployment, say) is an operator's
 * resource: the operator creates its pods at run time, and nothing in the
 * object itself is a container start to wrap.
 */
export function vllmImageWithoutContainers(object: Plain): { image: string; path: (string | number)[] } | undefined {
  // A Kubernetes object of an API group (a custom resource), not a values file that happens to name an image.
  if (typeof object.kind !== 'string' || typeof object.apiVersion !== 'string' || !object.apiVersion.includes('/')) return undefined;
  let found: { image: string; path: (string | number)[] } | undefined;
  let containers = false;
  const walk = (value: unknown, path: (string | number)[], depth: number): void => {
    if (containers || depth > MAX_DEPTH || !value || typeof value !== 'object') return;
    if (Array.isArray(value)) {
      value.forEach((item, i) => walk(item, [...path, i], depth + 1));
      return;
    }
    for (const [key, child] of Object.entries(value as Plain)) {
      if (key === 'containers' && Array.isArray(child)) containers = true;
      if (found === undefined && key.toLowerCase().endsWith('image')) {
        const repository = asObject(child)?.repository;
        const image = typeof child === 'string' ? child : typeof repository === 'string' ? repository : undefined;
        if (imageIsVllmFamily(image)) found = { image: image!, path: [...path, key] };
      }
      walk(child, [...path, key], depth + 1);
    }
  };
  walk(object, [], 0);
  return containers ? undefined : found;
}

/** The object's text names vLLM somewhere (an OpenShift Template's objects are named only then). */
export function mentionsVllm(value: unknown): boolean {
  return /vllm/i.test(JSON.stringify(value) ?? '');
}
