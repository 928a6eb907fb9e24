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

/** The object's text names vLLM somewhere (an OpenShift Template's objects are named only then). */
export function mentionsVllm(value: unknown): boolean {
  return /vllm/i.test(JSON.stringify(value) ?? '');
}
