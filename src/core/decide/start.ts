/**
 * What a container runs: the argv the kubelet will exec. Kubernetes rules:
 * `command` replaces the image's ENTRYPOINT and drops its CMD; `args` replaces
 * the CMD; an absent, null or empty list counts as not given.
 *
 * An image's start comes from, in order: the config file's `images` (a
 * digest, then repository and tag; `like:` borrows a table row), the built-in
 * table, and the image's registry (src/registry, looked up at the CLI's edge;
 * the answers arrive here as data). With `registryLookup: always` the
 * registry is asked before the table.
 */
import { PreflightError, type ErrorDetails } from '../errors.js';
import { effectiveTag, parseImage, repositoryForConfig, repositoryMatches, type ImageReference } from '../tables/image-ref.js';
import { findKnownImage, isKnownRepository, lookAlikeRepository, whyUnplaced, type KnownImage } from '../tables/images.js';
import type { ImageStart, RegistryLookupMode } from '../options.js';
import { globMatches } from './glob.js';
import { PREFLIGHT_MARKER_PREFIX } from '../preflight/script.js';

/** What an image's registry says it runs (src/registry looks it up at a door's edge). */
export interface ImageStartAnswer {
  image: string;
  entrypoint: string[];
  cmd: string[];
  /** What the reference resolved to (the tag's digest, or the pinned digest). */
  digest: string;
  /** The platform of the image read, e.g. linux/amd64. */
  platform: string;
  source: 'registry' | 'cache' | 'stale-cache';
  /** When the registry last confirmed the tag → digest (ISO 8601); for stale-cache, in the past. */
  checkedAt: string;
  warning?: string;
}

/**
 * Why a lookup failed, for the fix: the registry could not be reached (network,
 * TLS, timeout, 429, 5xx), refused the credentials, has no such image, or the
 * reference or what came back is not usable.
 */
export type LookupFailureKind = 'unreachable' | 'denied' | 'not-found' | 'invalid';

export interface LookupFailure {
  image: string;
  /** One line: why. */
  error: string;
  kind?: LookupFailureKind;
  /** The lookup policy refused the registry by name, before any connection (registryAllow would let it be asked). */
  notAllowed?: true;
}

export const WRAPPER_COMMAND: readonly string[] = ['/bin/sh', '-ec'];

/** Registry answers by image as written (src/registry, looked up at the CLI's edge). */
export type RegistryAnswers = ReadonlyMap<string, ImageStartAnswer | LookupFailure>;

export interface StartSources {
  images: readonly ImageStart[];
  registry: RegistryAnswers;
  lookup: RegistryLookupMode;
}

/** Where a start came from, for `explain` and the JSON report. */
export interface StartEvidence {
  source: 'command' | 'wrapped' | 'config' | 'table' | 'registry';
  /** Human-readable: the table row's evidence, the registry digest, the config entry. */
  detail: string;
  digest?: string;
}

export interface ContainerStart {
  /** The full argv: what goes after `--` in the wrapped args (image parts escaped for the kubelet). */
  start: string[];
  origin: string;
  evidence: StartEvidence;
  /** The container was already wrapped (by this or an earlier version). */
  wrappedBefore: boolean;
  warnings: string[];
}

/**
 * A wrapped container: our command, the script (as written for the kubelet,
 * or single-quoted as one bash word for KubeRay's join: ./kuberay.ts) and `--`.
 */
export function isWrapped(command: readonly string[] | null, args: readonly string[] | null): boolean {
  return (
    command !== null &&
    command.length === WRAPPER_COMMAND.length &&
    command.every((item, i) => item === WRAPPER_COMMAND[i]) &&
    args !== null &&
    args.length >= 2 &&
    (args[0]!.startsWith(PREFLIGHT_MARKER_PREFIX) || args[0]!.startsWith(`'${PREFLIGHT_MARKER_PREFIX}`)) &&
    args[1] === '--'
  );
}

/**
 * An image's ENTRYPOINT/CMD moved into `args` becomes subject to the
 * kubelet's `$(VAR)` and `$$` expansion, which the image start never was:
 * `$$` keeps every `$` literal.
 */
export function escapeForKubelet(item: string): string {
  return item.replaceAll('$', '$$$$');
}

interface ImageAnswer {
  entrypoint: readonly string[];
  cmd?: readonly string[];
  evidence: StartEvidence;
  origin: string;
  warnings: string[];
}

/** What each source said, for a refusal that names what was tried. */
interface Attempts {
  config?: string;
  table?: string;
  registry?: string;
  /** The image whose answer the registry lookup should fetch (the CLI does it, then runs again). */
  wanted?: string;
  /** The registry may not be asked (the lookup policy). */
  notAllowed?: boolean;
}

function configEntryMatches(entry: ImageStart, image: ImageReference): boolean {
  if (!repositoryMatches(image, entry.repository)) return false;
  if (entry.digest !== undefined) return image.digest === entry.digest;
  const tag = effectiveTag(image);
  const pattern = entry.tag ?? '*';
  return pattern === '*' || (tag !== undefined && globMatches(pattern, tag));
}

function fromRow(row: KnownImage, via: string): ImageAnswer {
  return {
    entrypoint: row.entrypoint,
    cmd: row.cmd,
    evidence: { source: 'table', detail: `${row.repository} (${row.confidence}: ${row.evidence}; ${row.link})${via}` },
    origin: `built-in table row ${row.repository}${via}`,
    warnings: [],
  };
}

function fromConfig(image: ImageReference, images: readonly ImageStart[], attempts: Attempts): ImageAnswer | undefined {
  const byDigest = images.find((e) => e.digest !== undefined && configEntryMatches(e, image));
  const entry = byDigest ?? images.find((e) => e.digest === undefined && configEntryMatches(e, image));
  if (!entry) {
    attempts.config = 'no config file images entry matches';
    return undefined;
  }
  const label = `config images entry ${entry.repository}${entry.digest ? `@${entry.digest}` : entry.tag ? `:${entry.tag}` : ''}`;
  if (entry.entrypoint !== undefined) {
    return { entrypoint: entry.entrypoint, cmd: entry.cmd, evidence: { source: 'config', detail: label, digest: entry.digest }, origin: label, warnings: [] };
  }
  const row = findKnownImage(image, entry.like!);
  if (row) return fromRow(row, ` (via ${label}, like: ${entry.like})`);
  attempts.config = `${label} says like: ${entry.like}, and ${whyUnplaced(image, entry.like)}`;
  return undefined;
}

function fromTable(image: ImageReference, attempts: Attempts): ImageAnswer | undefined {
  const row = findKnownImage(image);
  if (row) return fromRow(row, '');
  const alike = isKnownRepository(image) ? undefined : lookAlikeRepository(image);
  if (alike !== undefined && findKnownImage(image, alike)) {
    // The tag is placed; only the name is not known: say so, since `like:` is the whole fix.
    attempts.table = `the built-in table does not know the repository ${repositoryForConfig(image)}; it looks like a mirror of ${alike}, whose row places this tag once the config file says so (like: ${alike})`;
    return undefined;
  }
  attempts.table = alike ? `the image is not in the built-in table, and as a mirror of ${alike} (config like:) it would not be placed either: ${whyUnplaced(image, alike)}` : whyUnplaced(image);
  return undefined;
}

function fromRegistry(image: ImageReference, sources: StartSources, attempts: Attempts): ImageAnswer | undefined {
  if (sources.lookup === 'never') {
    attempts.registry = 'not looked up (registryLookup: never)';
    return undefined;
  }
  const answer = sources.registry.get(image.raw.trim());
  if (answer === undefined) {
    attempts.wanted = image.raw.trim();
    attempts.registry = 'not looked up yet';
    return undefined;
  }
  if ('error' in answer) {
    attempts.registry = `lookup failed: ${answer.error}`;
    attempts.notAllowed = answer.notAllowed === true;
    return undefined;
  }
  const when = answer.source === 'registry' ? 'read from the registry' : answer.source === 'cache' ? 'registry answer from the cache' : 'STALE registry answer from the cache';
  return {
    entrypoint: answer.entrypoint,
    cmd: answer.cmd,
    evidence: { source: 'registry', detail: `${answer.digest} ${answer.platform}, ${when}`, digest: answer.digest },
    origin: `image config ${answer.digest} (${answer.platform}), ${when}`,
    warnings: answer.warning ? [answer.warning] : [],
  };
}

function knownStart(image: ImageReference, sources: StartSources, attempts: Attempts): ImageAnswer | undefined {
  const configured = fromConfig(image, sources.images, attempts);
  if (configured) return configured;
  if (sources.lookup === 'always') return fromRegistry(image, sources, attempts) ?? fromTable(image, attempts);
  return fromTable(image, attempts) ?? fromRegistry(image, sources, attempts);
}

/**
 * The config `images` entry that would place an image the sources could not:
 * a value, so that each door writes it in its own form (the CLI as the
 * config file's YAML, the webhook as the chart's `config.images`).
 */
export interface ImageEntryFix {
  repository: string;
  /** `tag: "..."` or `digest: "..."`: what the entry pins. */
  pin: { key: 'tag' | 'digest'; value: string };
  /** A mirror of this table repository: `like:` is the whole entry. */
  like?: string;
  /** The container gives no args: the entry needs the image's CMD too. */
  needsCmd: boolean;
  /** How to read the ENTRYPOINT (and CMD) to put in, one sentence; absent for `like:`. */
  howToRead?: string;
}

/**
 * The entry for `raw` (an image as written); `lookupFailed`: the registry was not read here,
 * because it did not answer or, with `notAllowed`, because the lookup policy does not let it be asked.
 */
export function imageEntryFix(raw: string, hasArgs: boolean, lookupFailed: boolean, notAllowed = false): ImageEntryFix {
  const image = parseImage(raw);
  const repository = repositoryForConfig(image);
  const pin = image.digest !== undefined && image.tag === undefined ? { key: 'digest' as const, value: image.digest } : { key: 'tag' as const, value: effectiveTag(image) ?? '*' };
  const alike = isKnownRepository(image) ? undefined : lookAlikeRepository(image);
  if (alike !== undefined && findKnownImage(image, alike) !== undefined) return { repository, pin, like: alike, needsCmd: false };
  const what = hasArgs ? 'ENTRYPOINT' : 'ENTRYPOINT and CMD';
  // Right after the registry failed to answer, `resolve` (which asks the same registry) would fail too.
  const pulled = `read the image's ${what} where it can be pulled (\`skopeo inspect --config docker://${raw.trim()}\`, or \`docker image inspect ${raw.trim()}\`)`;
  const howToRead = !lookupFailed
    ? `\`vram-preflight resolve ${raw.trim()}\` prints this entry from the registry`
    : notAllowed
      ? `its registry is not one lookups may ask (registryAllow in the config would let it), so ${pulled}`
      : `the registry did not answer from here, so ${pulled}`;
  return { repository, pin, needsCmd: !hasArgs, howToRead };
}

/** The entry as YAML lines of an `images:` list item, at `indent` (the placeholders say what to put in). */
export function imageEntryYaml(fix: ImageEntryFix, indent: string): string[] {
  const lines = [`${indent}- repository: ${fix.repository}`];
  if (fix.like !== undefined) return [...lines, `${indent}  like: ${fix.like}`];
  lines.push(`${indent}  ${fix.pin.key}: "${fix.pin.value}"`, `${indent}  entrypoint: [...]   # the image's ENTRYPOINT`);
  if (fix.needsCmd) lines.push(`${indent}  cmd: [...]          # the image's CMD ([] if none): the container gives no args`);
  return lines;
}

/** The exact config snippet (and chart alternative) that places this image, for the refusal. */
function fixFor(image: ImageReference, hasArgs: boolean, rayPod: boolean, lookupFailed: boolean, notAllowed: boolean): string {
  const fix = imageEntryFix(image.raw, hasArgs, lookupFailed, notAllowed);
  const lines: string[] = fix.like !== undefined
    ? [`this looks like a mirror of ${fix.like}: add to the config file (--config)`, `  images:`, ...imageEntryYaml(fix, '    ')]
    : [`pin the image's start in the config file (--config); ${fix.howToRead}:`, `  images:`, ...imageEntryYaml(fix, '    ')];
  // In a Ray pod a command of vLLM's would take the place of the Ray node.
  if (!rayPod) lines.push('or name the start in the chart, e.g. command: ["vllm", "serve"] (right for every vllm-openai image since v0.5, whatever its ENTRYPOINT)');
  return lines.join('\n');
}

export interface StartInput {
  command: string[] | null;
  args: string[] | null;
  image: string | undefined;
  /** A container of a KubeRay pod: its fix never suggests a vLLM command. */
  rayPod?: boolean;
}

export function resolveStart(container: StartInput, sources: StartSources, context: ErrorDetails, onWanted: (image: string) => void): ContainerStart {
  const { command, args, image } = container;
  if (isWrapped(command, args)) {
    const start = args!.slice(2);
    if (start.length === 0) {
      throw new PreflightError('BAD_CONTAINER', 'the container is wrapped by vram-preflight but nothing follows "--" in its args', { ...context, fix: 'restore the original command/args in the chart' });
    }
    return { start, origin: 'the original start kept after "--" by an earlier vram-preflight', evidence: { source: 'wrapped', detail: 'kept after "--"' }, wrappedBefore: true, warnings: [] };
  }
  if (command !== null) {
    return { start: [...command, ...(args ?? [])], origin: args ? 'command + args' : 'command', evidence: { source: 'command', detail: args ? 'command + args' : 'command' }, wrappedBefore: false, warnings: [] };
  }
  if (image === undefined || image.trim() === '') {
    throw new PreflightError('BAD_CONTAINER', 'the container has no image and no command', { ...context, fix: 'give the container an image (Kubernetes requires one)' });
  }
  const reference = parseImage(image);
  const attempts: Attempts = {};
  const known = knownStart(reference, sources, attempts);
  // With `always`, the registry is asked even when the table placed the start.
  if (attempts.wanted !== undefined) onWanted(attempts.wanted);
  if (known && sources.lookup === 'always' && known.evidence.source === 'table' && attempts.registry?.startsWith('lookup failed')) {
    known.warnings.push(`registryLookup is always, but the registry could not be asked (${attempts.registry}); using the built-in table`);
  }
  if (!known) {
    const tried = [attempts.config, attempts.table, attempts.registry].filter(Boolean).join('; ');
    throw new PreflightError('UNKNOWN_START', `the container gives no command, so it runs the image's ENTRYPOINT, which is not known for sure: ${tried}`, {
      ...context,
      fix: fixFor(reference, args !== null, container.rayPod === true, attempts.registry?.startsWith('lookup failed') === true, attempts.notAllowed === true),
    });
  }
  const entrypoint = known.entrypoint.map(escapeForKubelet);
  if (args !== null) {
    return { start: [...entrypoint, ...args], origin: `image ENTRYPOINT from the ${known.origin} + args`, evidence: known.evidence, wrappedBefore: false, warnings: known.warnings };
  }
  if (known.cmd === undefined) {
    throw new PreflightError('UNKNOWN_START', `the container gives no args, so Kubernetes runs the image CMD, which ${known.origin} does not state`, {
      ...context,
      fix: 'add cmd: [...] ([] if the image has none) to the config file entry, or give the container args',
    });
  }
  return { start: [...entrypoint, ...known.cmd.map(escapeForKubelet)], origin: `image ENTRYPOINT + CMD from the ${known.origin}`, evidence: known.evidence, wrappedBefore: false, warnings: known.warnings };
}
