/**
 * The core's answer for one object given as a plain value (a Pod the API
 * server admits, as JSON): the same walk and the same decision as the
 * transform (./decide/object.ts), written as an RFC 6902 JSON Patch of
 * exactly the wrapped containers' `command` and `args`.
 *
 * A container that is already wrapped (by the post-renderer at render time,
 * or by an earlier admission of the same pod) is left as it is: a webhook
 * re-invoked on its own output, or on a pod a chart already wrapped, changes
 * nothing.
 */
import type { ContainerReport } from './decide/container.js';
import { visitObject, type ObjectVisit, type WalkResult } from './decide/object.js';
import type { RegistryAnswers, StartSources } from './decide/start.js';
import { asObject, clone, copyAlong, firstDifference, formatPath, valueAt, withStarts, type IntendedStart } from './values.js';
import { PreflightError, type DocumentRef } from './errors.js';
import type { Options } from './options.js';
import { emptyDeviceClaims, type DeviceClaims } from './tables/gpu.js';

export interface JsonPatchOperation {
  op: 'add' | 'remove' | 'replace' | 'test';
  path: string;
  value?: unknown;
}

export interface PatchInput {
  /** Registry answers by image reference as written (looked up at the door's edge). */
  registry?: RegistryAnswers;
  /** DRA claims the pod refers to, read by the door (a pod alone names them, not their device class). */
  claims?: DeviceClaims;
  /** How messages name the object (default: its kind and name). */
  ref?: Partial<DocumentRef>;
  /**
   * How a container's command and args are read: `vram-preflight admit` reads
   * them from the YAML as the post-renderer does (transform's ReadDocument);
   * absent, from the value, as the API server sends it.
   */
  access?: ObjectVisit['access'];
  /** Leave already wrapped containers as they are (default: the webhook's rule); false: decide them again, as a render does. */
  keepWrapped?: boolean;
}

export interface PatchResult extends WalkResult {
  /** Operations on the wrapped containers' command and args only; empty: nothing to change. */
  patch: JsonPatchOperation[];
  /** Images only their registry can place: look them up, then call again with `registry`. */
  wantedImages: string[];
}

/** RFC 6901: `~` is `~0`, `/` is `~1` inside a reference token. */
export function pointerSegment(key: string): string {
  return key.replaceAll('~', '~0').replaceAll('/', '~1');
}

function jsonPointer(path: readonly (string | number)[]): string {
  return path.map((step) => `/${pointerSegment(String(step))}`).join('');
}


/** A list as the API server holds it: absent, null or empty is "not given"; anything but strings cannot be read. */
function readList(container: Record<string, unknown>, key: 'command' | 'args'): string[] | null {
  const list = container[key];
  if (list === undefined || list === null) return null;
  if (!Array.isArray(list)) throw new PreflightError('BAD_CONTAINER', `the container's ${key} is not a list`, { fix: `write ${key} as a list of strings` });
  list.forEach((item, i) => {
    if (typeof item !== 'string') throw new PreflightError('BAD_CONTAINER', `${key}[${i}] of the container is not a string`, { fix: `quote ${key}[${i}]` });
  });
  return list.length === 0 ? null : [...(list as string[])];
}

/** The operations that give a container its intended start. `add` replaces a member that exists (RFC 6902 4.1). */
function operations(object: unknown, { path, command, args }: IntendedStart): JsonPatchOperation[] {
  const at = jsonPointer(path);
  const ops: JsonPatchOperation[] = [{ op: 'add', path: `${at}/command`, value: [...command] }];
  if (args !== null) ops.push({ op: 'add', path: `${at}/args`, value: [...args] });
  else if (asObject(valueAt(object, path))?.args !== undefined) ops.push({ op: 'remove', path: `${at}/args` });
  return ops;
}

export function patchObject(object: unknown, options: Options, input: PatchInput = {}): PatchResult {
  const value = asObject(object);
  const metadata = asObject(value?.metadata);
  const name = typeof metadata?.name === 'string' ? metadata.name : typeof metadata?.generateName === 'string' ? `${metadata.generateName}*` : undefined;
  const ref: DocumentRef = { index: 1, line: 0, kind: typeof value?.kind === 'string' ? value.kind : undefined, name, ...input.ref };
  const result: PatchResult = { patch: [], containers: [], errors: [], warnings: [], wantedImages: [] };
  const sources: StartSources = { images: options.images, registry: input.registry ?? new Map(), lookup: options.registryLookup };
  const wanted = new Set<string>();
  const intended: { start: IntendedStart; report: ContainerReport }[] = [];
  const visit: ObjectVisit = {
    ref,
    options,
    sources,
    claims: input.claims ?? emptyDeviceClaims(),
    result,
    keepWrapped: input.keepWrapped ?? true,
    wanted,
    access:
      input.access ??
      ((path) => {
        const container = asObject(valueAt(object, path));
        return container ? { readArgv: (key) => ({ items: readList(container, key) }) } : undefined;
      }),
    write: ({ intended: start }, report) => {
      intended.push({ start, report });
    },
  };
  visitObject(visit, object, []);
  // The same check as every edit of a render: applied to a copy, the patch changes exactly the intended starts.
  for (const { start, report } of intended) {
    const ops = operations(object, start);
    const problem = firstDifference(withStarts(object, [start]), applyPatch(object, ops));
    if (problem) {
      const error = new PreflightError('UNSAFE_EDIT', `the patch would also change ${formatPath(problem)}`, { document: ref, container: report.container, image: report.image, fix: 'report this as a bug of vram-preflight' });
      report.action = 'error';
      report.reason = error.message;
      report.error = error;
      result.errors.push(error);
      continue;
    }
    result.patch.push(...ops);
  }
  result.wantedImages = [...wanted];
  return result;
}

/**
 * Applies `add` and `remove` operations of object members (all this module
 * writes) to a copy (what they do not touch is shared with `object`). Enough to check our own patches; a door's tests apply
 * them with an independent RFC 6902 implementation.
 */
export function applyPatch(object: unknown, ops: readonly JsonPatchOperation[]): unknown {
  let copy = object;
  for (const op of ops) {
    const tokens = op.path.split('/').slice(1).map((t) => t.replaceAll('~1', '/').replaceAll('~0', '~'));
    const last = tokens.pop()!;
    // Copied along the way to the member written, shared elsewhere (see copyAlong).
    const copied = copyAlong(copy, tokens);
    copy = copied.root;
    const parent = copied.node as Record<string, unknown>;
    if (op.op === 'add') parent[last] = clone(op.value);
    else if (op.op === 'remove') delete parent[last];
    else throw new Error(`applyPatch: ${op.op} is not written by this module`);
  }
  return copy;
}
