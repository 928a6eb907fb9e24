/**
 * What a container runs: the argv the kubelet will exec. Kubernetes rules:
 * `command` replaces the image's ENTRYPOINT and drops its CMD; `args` replaces
 * the CMD; an absent, null or empty list counts as not given.
 */
import { PreflightError, type ErrorDetails } from './errors.js';
import { findKnownImage, isKnownRepository, parseImage, repositoryMatches, type ImageReference } from './images.js';
import type { ImageStart } from './config.js';
import { globMatches } from './glob.js';
import { PREFLIGHT_MARKER_PREFIX } from './preflight.js';

export const WRAPPER_COMMAND: readonly string[] = ['/bin/sh', '-ec'];

export interface ContainerStart {
  /** The full argv: what goes after `--` in the wrapped args. */
  start: string[];
  /** How it was found, for `explain`. */
  origin: string;
  /** The container was already wrapped (by this or an earlier version). */
  wrappedBefore: boolean;
}

export function isWrapped(command: readonly string[] | null, args: readonly string[] | null): boolean {
  return (
    command !== null &&
    command.length === WRAPPER_COMMAND.length &&
    command.every((item, i) => item === WRAPPER_COMMAND[i]) &&
    args !== null &&
    args.length >= 2 &&
    args[0]!.startsWith(PREFLIGHT_MARKER_PREFIX) &&
    args[1] === '--'
  );
}

function findConfiguredImage(image: ImageReference, images: readonly ImageStart[]): ImageStart | undefined {
  const tag = image.tag ?? (image.digest === undefined ? 'latest' : undefined);
  return images.find((entry) => {
    const wanted = parseImage(entry.repository);
    const sameRegistry = !entry.repository.includes('/') || wanted.registry === 'docker.io' || wanted.registry === image.registry;
    if (!sameRegistry || !repositoryMatches(image, wanted.repository)) return false;
    const pattern = entry.tag ?? '*';
    return pattern === '*' || (tag !== undefined && globMatches(pattern, tag));
  });
}

export function resolveStart(
  container: { command: string[] | null; args: string[] | null; image: string | undefined },
  images: readonly ImageStart[],
  context: ErrorDetails,
): ContainerStart {
  const { command, args, image } = container;
  if (isWrapped(command, args)) {
    const start = args!.slice(2);
    if (start.length === 0) {
      throw new PreflightError('BAD_CONTAINER', 'the container is wrapped by vram-preflight but nothing follows "--" in its args', {
        ...context,
        fix: 'restore the original command/args in the chart',
      });
    }
    return { start, origin: 'the original start kept after "--" by an earlier vram-preflight', wrappedBefore: true };
  }
  if (command !== null) {
    return { start: [...command, ...(args ?? [])], origin: args ? 'command + args' : 'command', wrappedBefore: false };
  }
  if (image === undefined || image.trim() === '') {
    throw new PreflightError('BAD_CONTAINER', 'the container has no image and no command', context);
  }
  const reference = parseImage(image);
  const configured = findConfiguredImage(reference, images);
  const builtIn = configured ? undefined : findKnownImage(reference);
  const known = configured ?? builtIn;
  const fixByConfig = `set the start in the container's command (e.g. command: ["vllm", "serve"]), or add the image to the config file: images: [{repository: "${reference.registry === 'docker.io' ? reference.repository.replace(/^library\//, '') : `${reference.registry}/${reference.repository}`}", tag: "${reference.tag ?? '*'}", entrypoint: [...], cmd: [...]}]`;
  if (!known) {
    const why =
      reference.tag === undefined && reference.digest !== undefined
        ? 'the image is pinned by digest only, so its tag (and with it its ENTRYPOINT) cannot be placed'
        : isKnownRepository(reference)
          ? `the tag "${reference.tag ?? 'latest'}" cannot be placed in the built-in table (its ENTRYPOINT changed between releases; see docs/detection.md)`
          : 'the container has no command and the image is not in the built-in table, so what it runs is unknown';
    throw new PreflightError('UNKNOWN_START', why, { ...context, fix: fixByConfig });
  }
  const source = builtIn ? `built-in table (${builtIn.evidence})` : 'config file images';
  if (args !== null) {
    return { start: [...known.entrypoint, ...args], origin: `image ENTRYPOINT from the ${source} + args`, wrappedBefore: false };
  }
  if (known.cmd === undefined) {
    throw new PreflightError('UNKNOWN_START', 'the container gives no args, so Kubernetes runs the image CMD, which the config entry does not state', {
      ...context,
      fix: 'add cmd: [...] ([] if the image has none) to the config file entry, or give the container args',
    });
  }
  return { start: [...known.entrypoint, ...known.cmd], origin: `image ENTRYPOINT + CMD from the ${source}`, wrappedBefore: false };
}
